"""The model a command asks for, how it is compared with a running server's, and how it is
printed (never with a key)."""

import argparse
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.errors import EXIT_USAGE, CommandError
from toolpipe.infra.cli.model_endpoint import ModelInUse, fingerprint, shown, wanted_model
from toolpipe.infra.cli.session import LocalSession

ARGS = argparse.Namespace()


def test_the_model_asked_for_is_openai_base_url_normalised_or_none() -> None:
    assert wanted_model(ARGS, {}) is None
    assert wanted_model(ARGS, {"OPENAI_BASE_URL": "  "}) is None  # blank: not asked
    assert wanted_model(ARGS, {"OPENAI_BASE_URL": " http://127.0.0.1:9/v1/ "}) == "http://127.0.0.1:9/v1"
    assert fingerprint(wanted_model(ARGS, {"OPENAI_BASE_URL": "http://h/v1/"})) == fingerprint("http://h/v1")
    assert fingerprint(None) is None


@pytest.mark.parametrize(
    ("url", "printed"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("https://user:sk-secret@proxy.example:8443/v1", "https://***@proxy.example:8443/v1"),
        ("https://sk-secret@proxy.example/v1", "https://***@proxy.example/v1"),
        ("https://x.example/v1?api-key=sk-secret", "https://x.example/v1?…"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://[::1:8000/v1", "(an address that does not parse)"),
    ],
)
def test_a_printed_endpoint_carries_no_key(url: str, printed: str) -> None:
    assert shown(url) == printed
    assert "sk-secret" not in fingerprint(url)  # type: ignore[operator]


def test_the_banner_tells_how_to_use_a_real_model_only_to_whoever_asked_for_none() -> None:
    demo = ModelInUse("scripted demo model at http://127.0.0.1:9/v1", None)
    assert demo.line() == (
        "model endpoint: scripted demo model at http://127.0.0.1:9/v1 (set OPENAI_BASE_URL for a real one)\n"
    )
    assert ModelInUse("http://h/v1", fingerprint("http://h/v1")).line() == "model endpoint: http://h/v1\n"


class _Client:
    def __init__(self, health: dict[str, Any]) -> None:
        self._health = health

    def health(self) -> tuple[int, Any]:
        return 200, self._health


def _found(health: dict[str, Any], pid: int = 4242) -> discovery.Connection:
    info = discovery.ServerInfo(url=f"http://127.0.0.1:{pid}", pid=pid, started="now")
    return discovery.Connection(_Client(health), info)  # type: ignore[arg-type]


def _session(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, servers: list[discovery.Connection], model: str | None
) -> LocalSession:
    found = iter(servers)
    monkeypatch.setattr(discovery, "connect", lambda home, env=None: next(found))
    waited: list[int] = []
    monkeypatch.setattr(discovery, "wait_stopping", lambda home, pid, deadline: waited.append(pid))
    session = LocalSession(tmp_path, model=model)
    session.waited = waited  # type: ignore[attr-defined]
    return session


def test_a_server_asked_for_the_same_model_or_a_session_asking_for_none_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    same = _found({"model_wanted": fingerprint("http://h/v1"), "model_endpoint": "http://h/v1/"})
    assert _session(monkeypatch, tmp_path, [same], "http://h/v1").url == same.info.url
    other = _found({"model_wanted": fingerprint("http://other/v1"), "auto": False})
    assert _session(monkeypatch, tmp_path, [other], None).url == other.info.url


def test_a_person_s_server_on_another_model_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    demo = _found({"model_wanted": None, "model_endpoint": "scripted demo model at http://127.0.0.1:5/v1"})
    with pytest.raises(CommandError) as refused:
        _session(monkeypatch, tmp_path, [demo], "https://u:sk-secret@h/v1")
    assert refused.value.code == EXIT_USAGE
    assert str(refused.value) == (
        "the server at http://127.0.0.1:4242 uses scripted demo model at http://127.0.0.1:5/v1; "
        "you asked for https://***@h/v1: stop it or unset OPENAI_BASE_URL"
    )


def test_a_command_s_server_on_another_model_is_waited_for_then_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = _found({"model_wanted": None, "model_endpoint": "demo", "auto": True}, pid=1)
    mine = _found({"model_wanted": fingerprint("http://b/v1"), "auto": True}, pid=2)
    session = _session(monkeypatch, tmp_path, [old, mine], "http://b/v1")
    assert session.url == mine.info.url and session.waited == [1]  # type: ignore[attr-defined]


def test_a_command_s_server_still_busy_after_the_wait_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(LocalSession, "MODEL_SWITCH_SECONDS", 0.0)
    busy = _found({"model_wanted": None, "model_endpoint": "demo", "auto": True})
    with pytest.raises(CommandError, match=r"still busy after 0 s: try again once it stops or unset"):
        _session(monkeypatch, tmp_path, [busy, busy], "http://b/v1")


def test_an_endpoint_nothing_answers_at_is_refused_before_a_run_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from toolpipe.infra.cli.model_endpoint import reachable_endpoint

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    reachable_endpoint({})  # none set: the scripted demo model, nothing to reach
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        reachable_endpoint({"OPENAI_BASE_URL": f"http://127.0.0.1:{listening.getsockname()[1]}/v1"})
    for url, why in [
        (
            "http://127.0.0.1:9/v1",
            "OPENAI_BASE_URL=http://127.0.0.1:9/v1: cannot connect to 127.0.0.1:9 (connection refused)",
        ),
        ("http://no-such-host.invalid/v1", "cannot connect to no-such-host.invalid:80 (no such host)"),
        ("localhost:8000/v1", "OPENAI_BASE_URL=localhost:8000/v1: not an http(s) URL"),
        ("https://sk-secret@[::1/v1", "OPENAI_BASE_URL=(an address that does not parse): not an http(s) URL"),
    ]:
        with pytest.raises(CommandError) as refused:
            reachable_endpoint({"OPENAI_BASE_URL": url})
        assert refused.value.code == EXIT_USAGE and why in str(refused.value)
        assert "sk-secret" not in str(refused.value)
    # Through a proxy, as the `openai` client would go, there is nothing to try from here.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    reachable_endpoint({"OPENAI_BASE_URL": "https://127.0.0.1:9/v1"})
