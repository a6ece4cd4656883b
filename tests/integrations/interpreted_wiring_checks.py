"""The wiring's checks with the Triton kernels, run under TRITON_INTERPRET=1 in a child pytest
(``test_transformers_wiring_interpreter.py`` starts it through the root conftest's
``run_under_interpreter``): no stand-in, so the slots' in-tree Triton implementations take every
call a wired detector makes."""

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from libreyolo.kernels import active  # noqa: E402

from .detectors import FAMILIES, check_family  # noqa: E402

#: One family per kernel path: the classic slot, the ragged slot's discrete and bilinear sampling
#: with unequal points per level; and the families whose sites sit in their own code (Grounding
#: DINO and MM Grounding DINO, LW-DETR, RF-DETR, PP-DocLayoutV3). Most of their small
#: configurations sample 2 points a level (D-FINE [1, 3, 2]), some with 2 heads, where the
#: interpreter cost most: it costs ~0.7 ms a program, and RT-DETR's 4 points took 20 s of this
#: child against 12 with 2 (CPU runs every family through the portable stand-in)
KERNEL_PATHS = ("rt_detr", "rt_detr_v2_discrete", "d_fine", "grounding_dino", "mm_grounding_dino",
                "lw_detr", "rf_detr", "pp_doclayout_v3")


@pytest.mark.parametrize("family", [FAMILIES[name] for name in KERNEL_PATHS],
                         ids=lambda f: f.name)
def test_a_wired_detector_runs_the_triton_kernels_within_the_bound(family, monkeypatch):
    assert active()[family.slot] == "triton", active()
    check_family(family, monkeypatch)
