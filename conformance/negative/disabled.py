"""A negative control for the `disabled` check: an implementation the registry disables while the
suite runs it must fail that cell and every later one (`conformance/running/disabled.py`)."""

from __future__ import annotations

from conformance.negative import breaks

SLOT = "fake_quant_int8_per_channel"


@breaks(SLOT)
def recurses_into_dispatch(x, scale, axis=0):
    """Calls ``dispatch`` of its own slot, which selects it again, until Python's stack runs out:
    the innermost ``dispatch`` catches the ``RecursionError``, disables it and lets the reference
    answer, so every call returns the reference's bits."""
    from libreyolo.kernels import dispatch

    return dispatch(SLOT, x, scale, axis)


CONTROLS = [
    ("dispatch-recursion", recurses_into_dispatch,
     "disabled: it fails inside every call and the reference answers for it; counting that "
     "answer, or declining its later cells as the environment's doing, would pass it"),
]
