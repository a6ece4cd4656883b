"""The README's quickstart (issue 50): five lines of Python whose output, pasted under them, is
what they really print, and the same for its detector wiring; and a time beside every command, so
that no command runs for minutes unannounced."""

from __future__ import annotations

import re
import subprocess
import sys

from doc_paths import ROOT

README = (ROOT / "README.md").read_text()
QUICKSTART = README.split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
#: "about 3 min on 2 cores", "about 1 s", "under 20 s": a figure and its unit
TIME = re.compile(r"\b(?:about|under) \d+ (?:s|min)\b")


def _block(text: str, language: str) -> str:
    return text.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_the_quickstart_is_five_lines_and_prints_what_the_readme_shows():
    code = _block(QUICKSTART, "python")
    assert len(code.splitlines()) == 5
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == _block(QUICKSTART, "text")


def test_the_detector_quickstart_prints_what_the_readme_shows():
    detector = QUICKSTART.split("### A transformers detector\n", 1)[1]
    run = subprocess.run([sys.executable, "-c", _block(detector, "python")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout == _block(detector, "text")
    assert TIME.search(detector.split("```python", 1)[0])


def test_every_command_has_a_time_beside_it():
    setup = _block(README, "bash")
    commands = _block(README.split("## Commands\n", 1)[1], "bash")
    timed = [comment for comment in re.split(r"\n(?=# \d\.)", setup) if comment.startswith("#")]
    timed += re.split(r"\n(?=\S)", commands)
    untimed = [entry.splitlines()[0] for entry in timed
               if not TIME.search(entry) and "on a GPU" not in entry]
    assert len(timed) == 7 and untimed == []
    assert TIME.search(QUICKSTART.split("```python", 1)[0])
