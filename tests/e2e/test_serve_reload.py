"""`toolpipe serve` follows your app (issue 33): a tool added while it runs is called by the next
run, a run in flight takes the new code at its next step and its history says which version
made each item, and an app that fails to import is named (module, error, file and line) when the
server starts, when it reloads, and in the answer to `POST /runs`. Real processes, a project
made by `toolpipe init`."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "snippets" / "tutorial"

HUMIDITY = '''

@tool
def get_humidity(city: str) -> str:
    """Get today's humidity in a city.

    Args:
        city: The city's name.
    """
    return f"{city}: 80 % humidity"
'''
HUMIDITY_SCRIPT = """  - when: 'humidity in (?P<city>[A-Za-z ]+)'
    replies:
      - tool_calls:
          - name: get_humidity
            arguments: {city: '{city}'}
      - content: '{results}'
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "PYTEST_", "OPENAI_"))}


def toolpipe(project: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolpipe", *args],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def new_project(tmp_path: Path) -> Path:
    made = toolpipe(tmp_path, "init", "wx")
    assert made.returncode == 0, made.stdout + made.stderr
    return tmp_path / "wx"


def add_tool(project: Path, code: str, name: str, script: str) -> None:
    """Add a tool to the scaffold's agent, and its script to scripted_model.yaml."""
    agents = project / "wx" / "agents.py"
    text = agents.read_text().replace("\n\nweather = Agent(", f"\n{code}\n\nweather = Agent(")
    agents.write_text(text.replace("    tools=[", f"    tools=[{name}, "))
    scripted = project / "scripted_model.yaml"
    scripted.write_text(scripted.read_text() + script)


class Serving:
    """`toolpipe serve` in the project; its output read as it comes (a thread)."""

    def __init__(
        self, project: Path, python: str = sys.executable, env: dict[str, str] | None = None
    ) -> None:
        import threading

        self.project = project
        self.process = subprocess.Popen(
            [python, "-m", "toolpipe", "serve", "--port", "0"],
            cwd=project,
            env=env or _env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        assert self._ready.wait(60) and self.process.poll() is None, "".join(self.lines)
        ready = next(line for line in self.lines if line.startswith("toolpipe server at "))
        self.url = ready.split()[3].removesuffix("/v1")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("toolpipe server at "):
                self._ready.set()
        self._ready.set()

    def said(self, pattern: str, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if re.search(pattern, line)), None)
            if found is not None:
                return found
            time.sleep(0.02)
        raise AssertionError(f"serve never said {pattern!r}: {''.join(self.lines)}")

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self) -> str:
        self.process.terminate()
        self.process.wait(timeout=60)
        return "".join(self.lines)


def items(project: Path, run_id: str) -> list[dict[str, Any]]:
    shown = toolpipe(project, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout)["messages"])


def run_id_of(output: str) -> str:
    found = re.search(r"^run ([0-9a-f]{32})", output, re.MULTILINE)
    assert found, output
    return found.group(1)


@pytest.mark.slow
def test_a_tool_added_while_serve_runs_is_called_by_the_next_run(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    server = Serving(project)
    try:
        before = toolpipe(project, "run", "What is the weather in Paris?")
        assert before.returncode == 0, before.stdout + before.stderr
        first = {
            i.get("app_version") for i in items(project, run_id_of(before.stdout)) if i["kind"] != "user"
        }

        add_tool(project, HUMIDITY, "get_humidity", HUMIDITY_SCRIPT)
        ran = toolpipe(project, "run", "What is the humidity in Lima?")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "-> get_humidity: Lima: 80 % humidity" in ran.stdout, ran.stdout
        assert "Unknown tool" not in ran.stdout and "warning" not in ran.stderr, ran.stderr
        server.said(r"toolpipe: reloaded your app \(version [0-9a-f]{12}\) after a change to wx/agents\.py")

        # Each item says which version of the app made it: the new one, not the first run's.
        after = {i.get("app_version") for i in items(project, run_id_of(ran.stdout)) if i["kind"] != "user"}
        assert len(first) == 1 and len(after) == 1 and None not in first | after
        assert after != first
    finally:
        output = server.stop()
    assert "Traceback" not in output, output


@pytest.mark.slow
def test_a_run_in_flight_takes_the_new_code_at_its_next_step(tmp_path: Path) -> None:
    """The call waits for approval; the tool is changed meanwhile: the model step before ran the
    old version, the call (run after the approval) and the step after it the new one."""
    project = new_project(tmp_path)
    add_tool(project, (TUTORIAL / "send_forecast.py").read_text().replace("from toolpipe import tool\n", ""),
             "send_forecast", (TUTORIAL / "forecast_script.yaml").read_text())  # fmt: skip
    server = Serving(project)
    try:
        waiting = toolpipe(project, "run", "Email ana@example.com the forecast for Paris", "--timeout", "3")
        run_id = run_id_of(waiting.stdout)
        _, listed = server.request("GET", "/v1/approvals?status=pending")
        (approval,) = [a for a in listed["approvals"] if a["run_id"] == run_id]

        agents = project / "wx" / "agents.py"
        agents.write_text(
            agents.read_text().replace('return f"sent the forecast', 'return f"v2: sent the forecast')
        )
        server.said(r"reloaded your app")
        decided = toolpipe(project, "approve", approval["approval_id"])
        assert decided.returncode == 0, decided.stderr
        deadline = time.monotonic() + 60
        while server.request("GET", f"/v1/runs/{run_id}")[1]["run"]["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)

        reply, result, answer = [i for i in items(project, run_id) if i["kind"] != "user"]
        assert result["content"] == "v2: sent the forecast for Paris to ana@example.com"
        assert reply["app_version"] != result["app_version"] == answer["app_version"]
    finally:
        server.stop()


@pytest.mark.slow
def test_an_app_that_fails_to_import_is_named_at_start_at_reload_and_in_the_answer(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    agents = project / "wx" / "agents.py"
    good = agents.read_text()
    broken = good.replace("\n\nweather = Agent(", '\n\nlimit = 1 + "2"\n\nweather = Agent(')
    agents.write_text(broken)
    line = broken.splitlines().index('limit = 1 + "2"') + 1
    why = (
        rf"app module 'wx\.agents' cannot be imported: TypeError: .*\({re.escape(str(agents))}, line {line}\)"
    )

    server = Serving(project)  # it serves: reads go on, and a save fixes it
    try:
        server.said(rf"toolpipe: error: {why}")
        status, body = server.request("POST", "/v1/runs", {"prompt": "What is the weather in Paris?"})
        assert status == 500 and re.fullmatch(why, body["message"]), body
        assert "internal error" not in body["message"]

        agents.write_text(good)
        server.said(r"reloaded your app")
        status, body = server.request("POST", "/v1/runs", {"prompt": "What is the weather in Paris?"})
        assert status == 202, body

        agents.write_text(
            good.replace("\n\nweather = Agent(", "\n\nimport no_such_module\n\nweather = Agent(")
        )
        at_reload = server.said(r"cannot be imported: ModuleNotFoundError")
        assert "app module 'wx.agents'" in at_reload and "no_such_module" in at_reload
        status, body = server.request("POST", "/v1/runs", {"prompt": "What is the weather in Paris?"})
        assert status == 500 and "ModuleNotFoundError" in body["message"], body
    finally:
        output = server.stop()
    assert "Traceback" not in output, output
