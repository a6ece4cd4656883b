"""The parity and conformance suite: `pytest conformance/` (see docs/conformance.md).

Its modules sit in folders by purpose, each importing only the folders before it: ``schema``,
``inputs``, ``catalogue`` (each slot's profile), ``running`` (cells and how they are judged),
``evidence`` (records and the gate), ``reporting``. ``plugin.py`` drives a run, ``negative/``
holds the negative controls, ``golden/`` the golden files, and the ``test_*.py`` modules are
the suite itself. The flat module names of earlier releases still import (``MOVED``,
docs/migration.md).
"""

from libreyolo.deprecated import moved_modules

#: Each module's old name and where it lives now.
MOVED = {
    "conformance.catalogue.spec": "conformance.schema.spec",
    "conformance.bounds": "conformance.schema.bounds",
    "conformance.declarations": "conformance.schema.declarations",
    "conformance.generators": "conformance.inputs.generators",
    "conformance.layouts": "conformance.inputs.layouts",
    "conformance.numerics": "conformance.inputs.numerics",
    "conformance.shapesets": "conformance.inputs.shapesets",
    "conformance.strategies": "conformance.inputs.strategies",
    "conformance.ms_deform_attn.cases": "conformance.inputs.ms_deform_attn_cases",
    "conformance.cells": "conformance.running.cells",
    "conformance.plan": "conformance.running.plan",
    "conformance.contracts": "conformance.running.contracts",
    "conformance.outcomes": "conformance.running.outcomes",
    "conformance.determinism": "conformance.running.determinism",
    "conformance.disabled": "conformance.running.disabled",
    "conformance.child": "conformance.running.child",
    "conformance.matrix": "conformance.running.matrix",
    "conformance.replay": "conformance.running.replay",
    "conformance.ms_deform_attn.parity": "conformance.running.ms_deform_attn_parity",
    "conformance.records": "conformance.evidence.records",
    "conformance.recorder": "conformance.evidence.recorder",
    "conformance.gate": "conformance.evidence.gate",
    "conformance.provenance": "conformance.evidence.provenance",
    "conformance.rederive": "conformance.evidence.rederive",
    "conformance.rerecord": "conformance.evidence.rerecord",
    "conformance.plain_run": "conformance.evidence.plain_run",
    "conformance.stack": "conformance.evidence.stack",
    "conformance.hub_cache": "conformance.evidence.hub_cache",
    "conformance.hub_pins": "conformance.evidence.hub_pins",
    "conformance.render": "conformance.reporting.render",
    "conformance.status": "conformance.reporting.status",
    "conformance.attention_evidence": "conformance.reporting.attention_evidence",
    "conformance.catalogue.attention": "conformance.catalogue.ms_deform_attn",
    "conformance.catalogue.attention_ragged": "conformance.catalogue.ms_deform_attn_ragged",
}

moved_modules(MOVED)
