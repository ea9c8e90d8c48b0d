"""The README's example (docs/snippets/quickstart.py) runs as a user runs it: `python FILE`, in a
folder of its own, and prints what its last comment says."""

import subprocess
import sys
from pathlib import Path

SNIPPET = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "quickstart.py"


def test_the_quickstart_runs_a_tool_an_approval_and_prints_its_result(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, str(SNIPPET)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    promised = SNIPPET.read_text().rstrip().splitlines()[-1].split("# ", 1)[1]
    assert ran.stdout.strip() == promised == "succeeded ['Paris: sunny, 21 °C', 'booked Chez Ana for 2']"
