"""The CLI as a user runs it (``python -m libreyolo.kernels`` and the ``libreyolo-kernels``
console script, in a subprocess): it shows the warnings a slot call gives about the settings,
says why each selection won, prints its version, and ends quietly when its reader stops early."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import libreyolo

SCRIPT = Path(sys.executable).with_name("libreyolo-kernels")
MODULE = (sys.executable, "-m", "libreyolo.kernels")
SETTINGS = ("LIBREYOLO_KERNELS", "LIBREYOLO_QUANT_KERNELS", "LIBREYOLO_FP8_FAST_ACCUMULATION")


def command(how: str) -> tuple[str, ...]:
    if how == "script" and not SCRIPT.exists():
        pytest.skip(f"the console script is not installed next to {sys.executable}")
    return (str(SCRIPT),) if how == "script" else MODULE


def environment(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    return {**env, **values}


def run(how: str, *args: str, **values: str) -> subprocess.CompletedProcess:
    return subprocess.run([*command(how), *args], capture_output=True, text=True, timeout=300,
                          check=False, env=environment(**values))


@pytest.mark.parametrize("how", ["module", "script"])
def test_misconfigured_settings_are_warned_about_as_a_call_warns(how):
    done = run(how, LIBREYOLO_KERNELS="bogus,nonslot=triton,fake_quant_fp8=",
               LIBREYOLO_FP8_FAST_ACCUMULATION="maybe")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    for expected in ("LIBREYOLO_KERNELS='bogus' names no registered implementation",
                     "LIBREYOLO_KERNELS names the unknown slot 'nonslot'",
                     "the item 'fake_quant_fp8=' names no implementation",
                     "LIBREYOLO_FP8_FAST_ACCUMULATION must be auto, 1/true/on/yes or "
                     "0/false/off/no, got 'maybe'"):
        assert sum(expected in line for line in warned) == 1, (expected, done.stderr)


def test_the_json_report_lists_the_same_warnings():
    done = run("module", "--json", LIBREYOLO_KERNELS="nonslot=triton",
               LIBREYOLO_FP8_FAST_ACCUMULATION="maybe")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)["warnings"]
    assert len(listed) == 2, listed
    assert listed[0].startswith("SelectionWarning: LIBREYOLO_KERNELS names the unknown slot")
    assert listed[1].startswith("ValueError: LIBREYOLO_FP8_FAST_ACCUMULATION must be auto")


def test_a_clean_environment_warns_of_nothing():
    done = run("module", "--json")
    assert json.loads(done.stdout)["warnings"] == []
    assert "warning:" not in done.stderr


def test_each_selection_says_why_it_won():
    slots = json.loads(run("module", "--json").stdout)["slots"]
    for name, slot in slots.items():
        eligible = [i["name"] for i in slot["implementations"] if i["eligible"]]
        assert slot["selected"] == (eligible[0] if eligible else None), name
        if not eligible:
            assert slot["why"].endswith(f"callers run their portable path, {slot['portable']}")
        elif eligible[0] == "reference":
            assert slot["why"].startswith("only the reference is eligible: "), name
        else:
            assert slot["why"].startswith("the newest registration whose environment checks "
                                          "pass"), name
    forced = json.loads(run("module", "--json", LIBREYOLO_KERNELS="fake_quant_fp8=off").stdout)
    assert forced["slots"]["fake_quant_fp8"]["why"] == "LIBREYOLO_KERNELS forces the reference"


def test_a_slot_left_to_the_portable_path_does_not_read_as_broken():
    done = run("module", LIBREYOLO_KERNELS="off")
    assert "unavailable" not in done.stdout
    assert "\nms_deform_attn  ->  portable path  (LIBREYOLO_KERNELS forces the callers' " \
           "portable path)\n" in done.stdout


@pytest.mark.parametrize("how", ["module", "script"])
def test_version_gives_the_package_version_and_the_commit(how):
    done = run(how, "--version")
    assert done.returncode == 0, done.stderr
    version = re.escape(libreyolo.__version__)
    assert re.fullmatch(rf"libreyolo {version} \(commit [0-9a-f]{{40}}\)\n", done.stdout), \
        done.stdout


def test_json_gives_the_package_version_and_the_commit():
    head = subprocess.run(["git", "-C", str(Path(libreyolo.__file__).parents[1]), "rev-parse",
                           "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    data = json.loads(run("module", "--json").stdout)
    assert data["libreyolo"] == {"version": libreyolo.__version__, "commit": head}


@pytest.mark.parametrize("how", ["module", "script"])
def test_a_reader_that_stops_early_ends_it_quietly(how):
    """``libreyolo-kernels | head -3``: the reader is gone before the report is written."""
    child = subprocess.Popen([*command(how)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=environment())
    child.stdout.close()  # before the child has imported torch, so every write finds no reader
    stderr = child.stderr.read().decode()
    child.stderr.close()
    assert child.wait(timeout=300) == 1
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr, stderr
