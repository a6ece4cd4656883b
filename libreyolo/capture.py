"""Is a graph being captured, and by what? Shared by the references and the kernels, so it sits
outside both.

Exports (ONNX export, ``torch.jit.trace``, ``torch.export``) leave this process and see the
portable path: the registry runs the reference (or hands a slot without one back to its caller's
portable path) while ``graph_capture()`` says ``"export"``. ``torch.compile`` keeps the model in
this process: a slot call becomes its operator, whose kernel is the registry's eager selection
(``libreyolo.kernels.operators``). Code that must not depend on this process's memory while any
graph is traced asks ``is_capturing()``. CUDA graph capture is different: accelerated kernels must
run under it, but nothing may read device data on the host, so argument checks that read values
skip them (``host_reads_forbidden()``).
"""

from __future__ import annotations

import contextlib
import threading

import torch

from libreyolo.deprecated import moved

EXPORT, COMPILE = "export", "compile"


def graph_capture() -> str | None:
    """What captures the running code: ``"export"`` for a graph that leaves this process
    (``torch.jit.trace``, ``torch.export``, either ONNX exporter), which must hold the portable
    math; ``"compile"`` for ``torch.compile``, whose model stays here and keeps the slots as
    operators (``libreyolo.kernels.operators``); None in eager mode."""
    compiler = torch.compiler
    if compiler.is_compiling():  # asked first: Dynamo refuses to trace the ONNX flags' reads
        return EXPORT if _exporting() else COMPILE
    if torch.jit.is_tracing() or compiler.is_exporting() or _in_onnx_export():
        return EXPORT
    return None


def _exporting() -> bool:
    """``torch.compiler.is_exporting()``, read from the flag it returns: torch 2.11's Dynamo
    folds the call to True under ``torch.compile`` as well (2.13 reads the flag, as here)."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else flag


def is_capturing() -> bool:
    """True under tracing, compiling, exporting or ONNX export.

    torch's functions are looked up on every call (a test or a tool may replace one); every
    torch this package admits (``>=2.11``, pyproject.toml) has ``torch.compiler.is_exporting``,
    so it is read as a plain attribute (every kernel call asks this). ``torch.jit.is_scripting``
    is not asked: TorchScript compiles Python source and never runs it, so running Python is
    never scripting (it is True only inside scripted code)."""
    if torch.jit.is_tracing():
        return True
    compiler = torch.compiler
    if compiler.is_compiling() or compiler.is_exporting():
        return True
    return _in_onnx_export()


def _onnx_export_flag():
    """``torch.onnx.is_in_onnx_export`` without its two imports per call (a few µs on every
    kernel call, which all ask this): the two flags it reads, looked up once. A torch whose
    exporter keeps them elsewhere gets the public function."""
    try:
        from torch.onnx._internal.exporter import _flags
        from torch.onnx._internal.torchscript_exporter._globals import GLOBALS
    except ImportError:
        return torch.onnx.is_in_onnx_export
    return lambda: bool(GLOBALS.in_onnx_export or _flags._is_onnx_exporting)


_in_onnx_export = _onnx_export_flag()


#: Why an implementation declaring ``traced=False`` (``libreyolo.kernels.Capabilities``) declines
#: a call while a graph is captured.
CAPTURE_REASON = "a graph is being captured (trace/compile/export): it must keep the portable path"


def _capture_reason() -> str | None:
    """declare Capabilities(traced=False) when registering, or ask is_capturing()."""
    return CAPTURE_REASON if is_capturing() else None


__getattr__ = moved(__name__, {"capture_reason": _capture_reason})


_no_reads = threading.local()


@contextlib.contextmanager
def no_host_reads():
    """Inside, ``host_reads_forbidden()`` is true: an operator's fake kernel checks arguments on
    fake tensors, which have no values to read (the real call checks those)."""
    previous = getattr(_no_reads, "on", False)
    _no_reads.on = True
    try:
        yield
    finally:
        _no_reads.on = previous


def checking_fake() -> bool:
    """True inside ``no_host_reads()``: arguments are being checked on fake tensors."""
    return getattr(_no_reads, "on", False)


#: ``.on``: inside ``tracing_kernels()`` (read directly where a call per lookup counts)
TRACING = threading.local()


@contextlib.contextmanager
def tracing_kernels():
    """Inside, an in-tree implementation is traced into a compiled graph
    (``libreyolo.kernels.traced``): it runs on fake tensors, its Triton launches become the
    graph's own launches (``triton_launch``), its ``Capabilities(traced=False)`` does not decline
    (the graph stays in this process, as an eager call does), and no plan made inside is kept or
    reused (a plan of fake tensors is no plan for a real call, nor a real one for a trace)."""
    previous = getattr(TRACING, "on", False)
    TRACING.on = True
    try:
        yield
    finally:
        TRACING.on = previous


def kernels_traced() -> bool:
    """True inside ``tracing_kernels()``."""
    return getattr(TRACING, "on", False)


def host_reads_forbidden() -> bool:
    """True when reading a tensor's values on the host would break a capture in progress, or
    while a compiled graph traces the kernels (``tracing_kernels``: asked on its own, since
    ``torch.compiler.is_compiling()`` can be false while AOTAutograd traces, and a plan would
    then read a fake tensor's values)."""
    if is_capturing() or checking_fake() or getattr(TRACING, "on", False):
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
