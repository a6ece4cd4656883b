"""The wiring adds no graph break on the route ``test_wiring_adds_no_graph_break`` leaves out:
D-FINE's and DEIMv2's ``ms_deformable_attn_core``, a router made per wired instance.

With transformers' runtime checks off (``TRANSFORMERS_DISABLE_TORCH_CHECK``: their ``.item()``
breaks D-FINE's graph in every decoder layer) the stock D-FINE compiles as one graph, so any break
the wired model has is the wiring's, the one thing this asks about. A break there would cut a
``mode="reduce-overhead"`` model into several CUDA graphs per forward.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from libreyolo.integrations import wire_deformable_attention  # noqa: E402

from .detectors import FAMILIES, build  # noqa: E402
from .test_transformers_wiring import _graph_breaks, portable_cores  # noqa: E402, F401


@pytest.mark.usefixtures("portable_cores")
def test_the_wired_ragged_core_attribute_adds_no_graph_break(monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_DISABLE_TORCH_CHECK", "1")
    model, arguments = build(FAMILIES["d_fine"])
    assert _graph_breaks(model, arguments) == 0, "stock D-FINE no longer compiles whole"
    assert [site.core for site in wire_deformable_attention(model).wired] == \
        ["ms_deformable_attn_core"] * FAMILIES["d_fine"].sites
    assert _graph_breaks(model, arguments) == 0
