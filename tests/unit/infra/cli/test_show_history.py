"""`toolpipe show` tells a run's history as it happened: where a fork came from, each resume
after the turn it went on from, and the runs forked from it."""

import io

from toolpipe.infra.cli.commands.show import write_history


def _item(seq: int, turn: int, content: str) -> dict[str, object]:
    return {"seq": seq, "turn": turn, "kind": "user", "content": content}


def test_a_resume_is_shown_after_the_turn_it_went_on_from() -> None:
    record = {
        "agent": "a",
        "forked_from": {"run_id": "r0", "turn": 1},
        "forks": ["r2"],
        "resumes": [
            {
                "turn": 1,
                "execution": 2,
                "by": "me",
                "ended": "limit",
                "error": "the model asked for 3 tool calls",
                "limits": {"max_tool_calls": 10, "max_tokens": None},
            }
        ],
    }
    out = io.StringIO()
    write_history(out, record, [_item(1, 0, "first"), _item(2, 1, "second"), _item(3, 2, "after")])
    lines = out.getvalue().splitlines()

    assert lines[0] == "forked from run r0 after turn 1"
    resumed = next(i for i, line in enumerate(lines) if line.startswith("resumed"))
    assert lines[resumed] == (
        "resumed after turn 1 in execution 2 by me (it had ended limit: the model asked for 3 tool calls); "
        "raised max_tool_calls 10"
    )
    assert lines[resumed - 1].startswith("[2]") and lines[resumed + 1].startswith("[3]")
    assert lines[-1] == "forked into run r2"
