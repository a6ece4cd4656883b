"""Every moved name of docs/migration.md still imports from its old module, with a
DeprecationWarning naming where it went, and is the new object (or, where the table says the
meaning changed, a stand-in that keeps the old meaning); every moved module of the suite imports
from its old name as the new module itself, and runs as a command from it."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from libreyolo.kernels import Capabilities

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
ROW = re.compile(r"^\| `([\w.]+):(\w+)` \| `([\w.]+):(\w+)` \| (.*) \|$")
ROWS = [ROW.match(line).groups() for line in DOCS.read_text().splitlines() if ROW.match(line)]
#: Rows whose old name keeps its old meaning through a stand-in (the table's note says so).
STAND_INS = {"capture_reason", "environment_ok"}


def _old(module: str, name: str):
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.{name} is deprecated")):
        return getattr(importlib.import_module(module), name)


def test_the_table_has_its_rows():
    assert len(ROWS) >= 8


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}.{r[1]}" for r in ROWS])
def test_a_moved_name_warns_and_is_the_new_one(row):
    old_module, old_name, new_module, new_name, _ = row
    old = _old(old_module, old_name)
    new = getattr(importlib.import_module(new_module), new_name)
    if old_name in STAND_INS:
        assert callable(old) and old is not new
    else:
        assert old is new


def test_the_stand_ins_keep_the_old_meaning(monkeypatch):
    capture = importlib.import_module("libreyolo.capture")
    classic = importlib.import_module("libreyolo.kernels.attention.ms_deform_attn.triton_provider")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        capture_reason, environment_ok = capture.capture_reason, classic.environment_ok
    assert capture_reason() is None and isinstance(environment_ok(), bool)
    monkeypatch.setattr("torch.jit.is_tracing", lambda: True)
    assert "a graph is being captured" in capture_reason()
    assert Capabilities(traced=False).decline("fake_quant_fp8", (), {}) is not None


def test_the_likewise_names_move_too():
    module = "libreyolo.kernels.attention.ms_deform_attn.triton_provider"
    note = next(r[4] for r in ROWS if r[0] == module and r[1] == "SUPPORTED_DTYPES")
    names = re.findall(r"`(\w+)`", note)
    common = importlib.import_module("libreyolo.kernels.attention.ms_deform_attn.triton_common")
    assert len(names) >= 10
    for name in names:
        assert _old(module, name) is getattr(common, name)


def test_an_unknown_name_is_still_an_attribute_error():
    name = "no_such_name"
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(importlib.import_module("libreyolo.capture"), name)


MODULE_ROW = re.compile(r"^\| `([\w.]+)` \| `([\w.]+)` \|$")
MODULE_ROWS = [MODULE_ROW.match(line).groups() for line in DOCS.read_text().splitlines()
               if MODULE_ROW.match(line)]


def test_the_module_table_is_the_suites_own():
    from conformance import MOVED

    assert dict(MODULE_ROWS) == MOVED and len(MOVED) >= 30


@pytest.mark.parametrize("row", MODULE_ROWS, ids=[r[0] for r in MODULE_ROWS])
def test_a_moved_module_warns_and_is_the_new_one(row):
    old, new = row
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} is deprecated: moved to {new}")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_an_old_module_of_a_gone_package_imports_from_it_as_the_new_one():
    """``conformance/ms_deform_attn/`` is gone: ``from`` its old name, a moved module is still
    the new module, with one warning."""
    for name in ("conformance.ms_deform_attn", "conformance.ms_deform_attn.parity"):
        sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning) as record:  # from ... import parity, as Python runs it
        parity = __import__("conformance.ms_deform_attn", fromlist=["parity"]).parity
    assert [str(w.message) for w in record] == [
        "conformance.ms_deform_attn.parity is deprecated: moved to "
        "conformance.running.ms_deform_attn_parity (docs/migration.md)"]
    assert parity is importlib.import_module("conformance.running.ms_deform_attn_parity")


def test_importing_an_old_name_leaves_the_new_modules_spec_alone():
    """The suite's digests find a catalogue module by its spec: importing an old name must not
    make it the old name's (origin None), or nothing is digested after it in that process."""
    old, new = "conformance.catalogue.attention", "conformance.catalogue.ms_deform_attn"
    importlib.import_module(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning):
        importlib.import_module(old)
    origin = importlib.util.find_spec(new).origin
    assert origin is not None and origin.endswith("ms_deform_attn.py")


def test_an_old_module_name_still_runs_as_a_command():
    result = subprocess.run([sys.executable, "-m", "conformance.status", "--help"],
                            capture_output=True, text=True, cwd=DOCS.parents[1], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "conformance.reporting.status" in result.stdout
