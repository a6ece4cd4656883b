"""docs/conformance.md's first step for a third-party backend (issue 50): it states the two
rules most first attempts break, and its ``pyproject.toml`` is one to copy: valid TOML whose
entry point is the registry's group and names the package step 2 loads."""

from __future__ import annotations

import tomllib

from doc_paths import ROOT

from libreyolo.kernels import providers

GUIDE = (ROOT / "docs" / "conformance.md").read_text().split(
    "## Validating an out-of-tree backend", 1)[1]
STEP_ONE, STEP_TWO = GUIDE.split("\n1. ", 1)[1].split("\n2. ", 1)


def test_step_one_states_the_zero_code_and_straight_through_rules():
    assert "**Zero codes of the integer formats are `+0.0`**" in STEP_ONE
    assert "**A straight-through gradient is required**" in STEP_ONE


def test_step_one_s_pyproject_registers_the_package_step_two_loads():
    project = tomllib.loads(STEP_ONE.split("```toml\n", 1)[1].split("```", 1)[0])
    name = project["project"]["name"]
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["project"]["entry-points"] == {providers.ENTRY_POINT_GROUP: {name: name}}
    assert f"pytest conformance/ -p {name} " in STEP_TWO
