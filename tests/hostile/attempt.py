"""Running one try of ``cases.py`` and judging it: the same judge on every path."""

from __future__ import annotations

import warnings

from libreyolo.kernels import KernelDisabledWarning, failures

from .cases import Try, names_in


def attempt(t: Try, device: str) -> None:
    """Make the call; assert it raised (or warned) exactly ``t.error``, naming each of
    ``t.names``, and disabled nothing (no implementation is blamed for the caller's input)."""
    call = t.build(device)
    before = failures()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        raised = None
        try:
            out = call()
        except Exception as exc:  # noqa: BLE001 - the exception is what is judged
            raised = exc
    disabled = [w for w in seen if issubclass(w.category, KernelDisabledWarning)]
    assert not disabled and failures() == before, (
        f"{t.id} on {device}: the caller's bad input disabled an implementation: "
        f"{[str(w.message) for w in disabled] or failures()}")
    if issubclass(t.error, Warning):
        assert raised is None, f"{t.id} on {device}: raised {type(raised).__name__}: {raised}"
        wanted = [w for w in seen if w.category is t.error]
        assert wanted, (f"{t.id} on {device}: no {t.error.__name__}; warned "
                        f"{[(w.category.__name__, str(w.message)) for w in seen]}")
        message = " ".join(str(w.message) for w in wanted)
    else:
        assert raised is not None, (f"{t.id} on {device}: expected {t.error.__name__}, got a "
                                    f"result: {type(out).__name__}")
        assert type(raised) is t.error, (
            f"{t.id} on {device}: expected {t.error.__name__}, got "
            f"{type(raised).__name__}: {raised}")
        message = str(raised)
    for name in t.names:
        assert names_in(message, name), f"{t.id} on {device}: {name!r} not named in: {message}"


def valid_call(slot: str, device: str) -> None:
    """A valid call of ``slot`` through ``ops``: whatever implementation runs here, its result is
    the slot's declared output (the registry's judge disables nothing)."""
    from libreyolo.kernels import ops

    from .cases import valid

    inputs = valid(slot, device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDisabledWarning)
        getattr(ops, slot)(*inputs.args, **inputs.kwargs)
    assert failures() == {}, failures()
