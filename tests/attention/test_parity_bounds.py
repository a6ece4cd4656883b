"""The bounded check is strong enough: it rejects every negative control on the small cases.

(That it passes the real Triton kernels is checked in ``interpreted_checks.py``.)
"""

import pytest
import torch

from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs
from conformance.negative.ms_deform_attn import CONTROLS
from conformance.running.ms_deform_attn_parity import bounded_check
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable

SMALL_CASES = load_cases(sizes=("small",))


def failures(fn, dtype=torch.float32):
    """(case, quantity) pairs where ``fn`` breaks the bounded contract on the small cases."""
    return [(case.name, verdict.quantity) for case in SMALL_CASES
            for verdict in bounded_check(fn, *make_inputs(case, dtype=dtype, seed=3))
            if not verdict.passed]


@pytest.mark.parametrize(("fn", "caught_by"), [pytest.param(fn, why, id=name)
                                               for name, fn, why in CONTROLS])
def test_every_negative_control_is_rejected_on_the_output(fn, caught_by):
    rejected = failures(fn)
    assert any(quantity == "output" for _, quantity in rejected), caught_by


def test_the_portable_core_in_float32_passes_its_own_bound():
    assert failures(ms_deform_attn_portable) == []


def test_the_swap_control_is_invisible_on_square_levels_only():
    """Why the set needs non-square levels: on square ones H/W swapped is the real thing."""
    swapped = dict((name, fn) for name, fn, _ in CONTROLS)["height_width_swapped"]
    square = {c.name for c in SMALL_CASES if all(h == w for h, w in c.levels)}
    assert square and {name for name, _ in failures(swapped)}.isdisjoint(square)
