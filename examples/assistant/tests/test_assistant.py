"""The example agent, driven offline: a scripted model, the whole pipeline in this process."""

from toolpipe.testing import LocalPipeline, Reply, call

APP = "assistant.agents"  # the module that defines the agents, whatever folder pytest runs from


def test_the_assistant_computes_with_its_tools() -> None:
    with LocalPipeline(app=APP) as pipeline:
        pipeline.script(
            Reply(tool_calls=[call("square_root", x=475695037565), call("sum", a=1, b=2)]),
            Reply(content="The square root is about 689706.49, and 1 + 2 = 3."),
        )
        run = pipeline.run("What is the square root of 475695037565, and 1 + 2?", agent="assistant")
    assert run.status == "succeeded", run.error
    assert run.tool_results[0].startswith("689706.486532")
    assert run.tool_results[1] == "3.0"
    assert run.output == "The square root is about 689706.49, and 1 + 2 = 3."


def test_an_alarm_in_the_past_is_an_error_the_model_reads() -> None:
    with LocalPipeline(app=APP) as pipeline:
        pipeline.script(
            Reply(tool_calls=[call("set_alarm", time="2020-01-01T07:30:00+01:00")]),
            Reply(content="That time has passed."),
        )
        run = pipeline.run("Wake me at 7:30 on 1 January 2020.", agent="assistant")
    assert run.status == "succeeded", run.error
    assert "is in the past" in run.tool_results[0]


def test_an_email_is_sent_once_a_person_approves_it_and_never_when_denied() -> None:
    email = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")
    with LocalPipeline() as pipeline:
        asked: list[dict[str, object]] = []
        pipeline.script(Reply(tool_calls=[email]), Reply(content="Sent."))
        run = pipeline.run(
            "Email Ana that the report is ready.", agent="assistant", decide=lambda a: asked.append(a) or True
        )
        sent = pipeline.runtime.ses.get_send_quota()["SentLast24Hours"]

        pipeline.script(Reply(tool_calls=[email]), Reply(content="Not sent."))
        denied = pipeline.run("Email Ana again.", agent="assistant", decide=lambda a: "Ana has it already")
        sent_after = pipeline.runtime.ses.get_send_quota()["SentLast24Hours"]

    assert [a["tool"] for a in asked] == ["send_email"]
    assert run.status == "succeeded", run.error
    assert run.tool_results[0].startswith("Email sent to ana@example.com")
    assert sent == 1
    assert denied.tool_results == [
        "Error: A person denied the call to 'send_email'; it was not run. Their reason: Ana has it already"
    ]
    assert sent_after == 1


def test_ask_user_waits_for_a_persons_answer_and_the_model_reads_it() -> None:
    with LocalPipeline() as pipeline:
        asked: list[dict[str, object]] = []
        pipeline.script(
            Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="Lyon it is.")
        )
        run = pipeline.run("Book me a trip.", agent="assistant", decide=lambda a: asked.append(a) or "Lyon")

    assert [(a["kind"], a["question"]) for a in asked] == [("human", "Which city?")]
    assert run.status == "succeeded", run.error
    assert run.tool_results == ["Lyon"]


def test_triage_hands_the_request_to_the_assistant() -> None:
    with LocalPipeline(app=APP) as pipeline:
        pipeline.script(
            Reply(tool_calls=[call("transfer_to_assistant")]),
            Reply(tool_calls=[call("sum", a=2, b=3)]),
            Reply(content="2 + 3 = 5."),
        )
        run = pipeline.run("What is 2 + 3?", agent="triage")
    assert run.status == "succeeded", run.error
    assert run.agents == ["triage", "assistant", "assistant"]
    assert [(h["from_agent"], h["to_agent"]) for h in run.handoffs] == [("triage", "assistant")]
    assert run.tool_results == ["Transferred to assistant: the assistant agent answers from now on.", "5.0"]
    assert run.output == "2 + 3 = 5."
