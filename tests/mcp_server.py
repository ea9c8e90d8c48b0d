"""The example MCP server (infra/local/example_mcp_server.py) in a real subprocess on 127.0.0.1."""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def example_server(*args: str) -> Iterator[str]:
    """Start the server and yield its URL once it accepts connections; stop it afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-m", "toolpipe.infra.local.example_mcp_server", "--port", "0", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the socket listens; empty if it died
        assert line.startswith("listening on "), f"example MCP server did not start: {line!r}"
        yield line.removeprefix("listening on ").strip()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
