"""Installing a package must not change anyone's numbers silently: an implementation an installed
package registers is announced once per slot when it runs a slot in place of an in-tree one,
`active()` says where the selected one came from, and the example backend's installed entry
point registers no deliberately wrong implementation (its `broken` module, named, does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest
from registry_helpers import NO_REF, WITH_REF, tagged
from test_imports import run_python

from libreyolo.kernels import OutOfTreeWarning, active, registry
from libreyolo.kernels.providers import CALLER, ENTRY_POINT, IN_TREE, PACKAGE

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "libreyolo_example_backend"
AFFINE = "fake_quant_int8_affine"


@pytest.fixture
def installed_example(tmp_path) -> dict:
    """The example backend as pip would install it, without pip: its source on the path and a
    ``*.dist-info`` folder holding the entry points its ``pyproject.toml`` declares."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    dist = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    groups = project["entry-points"]
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
        for group, points in groups.items()))
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(EXAMPLE / "src")])}


CALLS = """
    import json, warnings
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        {opt_in}
        from libreyolo.kernels import active, ops, registered
        x, scale = torch.tensor([0.5, 1.5, 2.5, -0.5]), torch.tensor(1.0)
        out = [ops.fake_quant_int8_affine(x, scale, 0).tolist() for _ in range(2)]
        chosen = active()["fake_quant_int8_affine"]
        names = [i.name for i in registered("fake_quant_int8_affine")]
    print(json.dumps({{"out": out, "names": names,
                       "active": [chosen, chosen.origin, chosen.provider],
                       "announced": [str(w.message) for w in caught
                                     if w.category.__name__ == "OutOfTreeWarning"]}}))
    """


def test_the_installed_example_keeps_the_reference_numbers_and_is_announced_once(
        tmp_path, installed_example):
    seen = run_python(CALLS.format(opt_in=""), tmp_path, installed_example)
    assert seen["out"] == [[0.0, 2.0, 2.0, 0.0]] * 2  # the reference's, not C's rounding
    assert "example-broken" not in seen["names"]
    assert seen["active"] == ["example-correct", ENTRY_POINT, "libreyolo-example-backend"]
    mine = [m for m in seen["announced"] if AFFINE in m]
    assert len(mine) == 1, seen["announced"]
    assert "'example-correct', registered by libreyolo-example-backend (entry point)" in mine[0]
    assert "in place of the in-tree 'reference'" in mine[0]


def test_the_broken_implementation_registers_only_when_its_module_is_named(
        tmp_path, installed_example):
    seen = run_python(CALLS.format(opt_in="import libreyolo_example_backend.broken"), tmp_path,
                      installed_example)
    assert seen["names"][0] == "example-broken"
    assert seen["out"] == [[1.0, 2.0, 3.0, -1.0]] * 2  # asked for: it runs, as a caller's own
    assert seen["active"][:2] == ["example-broken", CALLER]


def _register(origin: str, provider: str | None, op: str = WITH_REF, name: str = "mine"):
    with registry.loading(origin, provider):
        registry.register(op, tagged(name, op), name=name)


@pytest.mark.parametrize("origin", [ENTRY_POINT, PACKAGE])
def test_an_installed_package_in_place_of_an_in_tree_one_warns_once_per_slot(clean_registry,
                                                                            origin):
    _register(origin, "some-dist")
    with pytest.warns(OutOfTreeWarning) as caught:
        chosen = active()[WITH_REF]
        registry.clear_cache()  # resolved again: not announced again
        active()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"{WITH_REF} now runs 'mine', registered by some-dist ({origin})" in message
    assert f"LIBREYOLO_KERNELS={WITH_REF}=reference keeps the in-tree one" in message
    assert chosen == "mine" and (chosen.origin, chosen.provider) == (origin, "some-dist")


@pytest.mark.parametrize("origin, op", [(CALLER, WITH_REF), (IN_TREE, WITH_REF),
                                        (ENTRY_POINT, NO_REF)])
def test_no_announcement_for_the_process_own_choice_or_nothing_in_tree_displaced(
        clean_registry, origin, op):
    _register(origin, "some-dist", op)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert active()[op] == "mine"


def test_active_names_where_each_selection_came_from(clean_registry):
    _register(CALLER, None)
    chosen = active()
    assert (chosen[WITH_REF].origin, chosen[WITH_REF].provider) == (CALLER, tagged.__module__)
    reference = chosen["fake_quant_int8_affine"]
    assert (reference, reference.origin) == ("reference", IN_TREE)
    assert reference.provider == "libreyolo.quant.fake_quant"
    assert (chosen[NO_REF], chosen[NO_REF].origin) == ("unavailable", None)


def test_the_cli_names_the_package_that_installed_the_selected_implementation(
        tmp_path, installed_example):
    env = {**os.environ, **installed_example}
    for argv, expected in ((["--json"], None),
                           ([], "example-correct  entry point (libreyolo-example-backend)")):
        done = subprocess.run([sys.executable, "-m", "libreyolo.kernels", *argv],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr
        if expected is None:
            rows = json.loads(done.stdout)["slots"][AFFINE]["implementations"]
            assert rows[0]["name"] == "example-correct"
            assert (rows[0]["origin"], rows[0]["provider"]) == (
                ENTRY_POINT, "libreyolo-example-backend")
        else:
            assert expected in done.stdout, done.stdout
