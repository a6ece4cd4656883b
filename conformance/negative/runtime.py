"""Negative controls for what an implementation gives back at run time (issue 35): it raises on
valid input, or returns the wrong shape, dtype or device, ``None`` or a generator, or answers
through ``dispatch`` where the registry had to replace its wrong answer. Each is judged twice
(`tests/hostile/test_runtime_controls.py`): by its conformance cell, which must fail by the check
named here, and by the registry, which on every path (``ops``, ``dispatch``, ``resolve``)
disables it with exactly one ``KernelDisabledWarning`` and lets the next implementation answer
(the reference; for a slot without one, the caller's portable path through ``None``).

One slot with a reference and one without: ``fake_quant_int8_per_channel`` (`WITH_REF`) and
``ms_deform_attn`` (`NO_REF`). They are wrong everywhere, so they are not `CONTROLS` (whose
narrowness `test_control_is_narrow` measures): they are `RUNTIME_CONTROLS`.
"""

from __future__ import annotations

import threading

from conformance.negative import breaks
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable
from libreyolo.quant.fake_quant import fake_quant_int8_per_channel

WITH_REF = "fake_quant_int8_per_channel"
NO_REF = "ms_deform_attn"
_ANSWER = {WITH_REF: fake_quant_int8_per_channel, NO_REF: ms_deform_attn_portable}


def _control(slot: str, how: str, wrong):
    """An implementation of `slot` that computes the right answer and then breaks it: `wrong`
    maps the right output to what it returns."""

    def impl(*args, **kwargs):
        return wrong(_ANSWER[slot](*args, **kwargs))

    impl.__name__ = impl.__qualname__ = f"{slot}_{how}"
    return breaks(slot)(impl)


def _raise(out):
    raise RuntimeError("launch failed: an illegal memory access (a deliberately broken control)")


def _generator(out):
    yield out


def _answers_through_dispatch(slot: str):
    """Called directly (as a conformance cell calls it), it asks ``dispatch`` of its own slot,
    which selects it again; that inner call returns a wrong shape, the registry's output judge
    disables it and the next implementation answers (the reference; ``None`` and then the
    portable path for a slot without one): so the direct call returns the right bits. Only the
    `disabled` check can tell that its answer is not its own."""
    inside = threading.local()

    def impl(*args, **kwargs):
        from libreyolo.kernels import dispatch

        if getattr(inside, "active", False):
            return _ANSWER[slot](*args, **kwargs).flatten()
        inside.active = True
        try:
            out = dispatch(slot, *args, **kwargs)
        finally:
            inside.active = False
        return out if out is not None else _ANSWER[slot](*args, **kwargs)

    impl.__name__ = impl.__qualname__ = f"{slot}_answers_through_dispatch"
    return breaks(slot)(impl)


#: (how, what it returns instead of the right output, the check its cell must fail)
BREAKS = (
    ("raises", _raise, "crash"),
    ("wrong_shape", lambda out: out.flatten(), "shape"),
    ("wrong_dtype", lambda out: out.double(), "dtype"),
    ("wrong_device", lambda out: out.to("meta"), "device"),
    ("returns_none", lambda out: None, "returns-tensor"),
    ("returns_generator", _generator, "returns-tensor"),
)

RUNTIME_CONTROLS = [
    (f"{slot}-{how}", _control(slot, how, wrong),
     f"{check}: its call gives what no caller can use; the registry disables it at run time")
    for slot in (WITH_REF, NO_REF) for how, wrong, check in BREAKS
] + [
    (f"{slot}-answers_through_dispatch", _answers_through_dispatch(slot),
     "disabled: the registry replaced its wrong inner answer; its cell must not pass on the "
     "answer another implementation gave")
    for slot in (WITH_REF, NO_REF)
]
