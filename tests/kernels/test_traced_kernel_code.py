"""A traced kernel runs the code its eager launch runs: built for sm_90 on CPU, its SASS under the
options inductor compiles it with equals its SASS under the launch's own options.

Inductor compiles a ``wrap_triton`` kernel itself, and torch drops every Triton compile option a
launch passes but ``num_warps`` and ``num_stages`` (``generate_ttir`` pops them; inductor's
compile options for a user kernel are the warps and stages, ``debug`` and ``sanitize_overflow``,
torch 2.11 to 2.13). A launch passing ``enable_fp_fusion=False`` is then compiled with fusion on:
its multiplies may be contracted into adds and round differently. On an H100 the traced ragged
MSDA gave values 1 to 16 units of the last place away from eager under inductor and replayed
CUDA graphs, while its identity-backend trace gave the eager bits. An implementation whose
kernels compile differently keeps the opaque operator (``benchmarks/rendering/traced_list.py``
lists it only when this check passed). No GPU: Triton's compiler and ``ptxas``/``nvdisasm`` (in
the Triton wheel) build and disassemble the kernel for an sm_90 target, launched as an sm_90
device launches it (``traced_launches``: the FP8 prologue's E4M3 conversion instruction). Below
sm_89 the prologue rounds in software, and contracts there only ``q + binade * 2**20``, a product
of two powers of two, exact: the same bits either way (though this check, comparing code, would
flag it).
"""

from __future__ import annotations

import re

import pytest
import torch
from traced_launches import TRACEABLE, TRACEABLE_IDS, compile_for_sm90, recorded_launches

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402  (after the skip: triton is optional)

from libreyolo.kernels.attention.ms_deform_attn import ragged_triton_kernels  # noqa: E402
from libreyolo.kernels.triton_kit import FloatKind  # noqa: E402

#: The options inductor gives a user-defined Triton kernel (besides its warps and stages).
INDUCTOR_OPTIONS = {"debug": True, "sanitize_overflow": False}
KEPT_OPTIONS = ("num_warps", "num_stages")

#: The discrete pixel pick's probe: the ragged kernels' ``_nearest_axis`` over 128 locations.
PROBE_LOCATIONS = tl.constexpr(128)


@triton.jit
def _pixel_pick_probe(u_ptr, out_ptr, size, DTYPE: tl.constexpr, PTX: tl.constexpr):
    i = tl.arange(0, PROBE_LOCATIONS)
    tl.store(out_ptr + i, ragged_triton_kernels._nearest_axis(tl.load(u_ptr + i), size, DTYPE,
                                                              PTX))


def _sass(kernel, parameters: dict, options: dict) -> list[str]:
    """The kernel's SASS instructions (addresses and comments dropped) for these parameters,
    compiled for sm_90 with these options, as ``JITFunction.run`` would compile it (tensors stand
    in as small real ones: the specialization reads their dtype and alignment)."""
    stand_in = {k: torch.empty(16, dtype=v.dtype) if isinstance(v, torch.Tensor) else v
                for k, v in parameters.items()}
    _, _, target, backend, binder = kernel.create_binder()
    bound, specialization, parsed = binder(**stand_in, **options)
    parsed, signature, constexprs, attrs = kernel._pack_args(backend, options, bound,
                                                             specialization, parsed)
    source = triton.compiler.ASTSource(kernel, signature, constexprs, attrs)
    compiled = triton.compile(source, target=target, options=parsed.__dict__)
    lines = (re.sub(r"/\*[0-9a-f]+\*/", "", line).split(";")[0].strip()
             for line in compiled.asm["sass"].splitlines())
    return [line for line in lines if line and not line.startswith(("//", "."))]


@pytest.mark.parametrize(("op", "name"), TRACEABLE, ids=TRACEABLE_IDS)
def test_a_traced_kernel_compiles_to_the_code_its_eager_launch_runs(op, name, monkeypatch,
                                                                    record_property):
    launches, _ = recorded_launches(op, name, monkeypatch, none_skips=False)
    for kernel, arguments in launches:
        parameters = {k: v for k, v in arguments.items() if k in kernel.arg_names}
        eager = {k: v for k, v in arguments.items() if k not in kernel.arg_names}
        inductor = {**{k: eager[k] for k in KEPT_OPTIONS if k in eager}, **INDUCTOR_OPTIONS}
        if set(eager) <= set(KEPT_OPTIONS):
            continue  # nothing dropped: inductor's options are the launch's
        assert _sass(kernel, parameters, inductor) == _sass(kernel, parameters, eager), (
            f"{kernel.fn.__name__}: compiled with {inductor} (inductor drops "
            f"{sorted(set(eager) - set(KEPT_OPTIONS))}) it is other code than the launch's "
            f"{eager}")
    record_property("same_code", f"{op}/{name}")  # launching no kernel, it runs no other code


@pytest.mark.parametrize("ptx", [True, False], ids=["ptx", "interpreter-arithmetic"])
def test_the_discrete_pixel_pick_rounds_twice_under_inductors_options(ptx, monkeypatch):
    """Discrete sampling picks pixel ``floor(u * W + 0.5)`` rounding the product and then the sum,
    as the portable path's tensor ops do. Compiled as inductor compiles a traced kernel (fusion
    on), the float32 pick has no FMA where the kernels run as PTX; the interpreter's plain multiply
    contracts there, which shows the probe sees a contraction."""
    parameters = {"u_ptr": torch.empty(PROBE_LOCATIONS.value),
                  "out_ptr": torch.empty(PROBE_LOCATIONS.value, dtype=torch.int32), "size": 7,
                  "DTYPE": int(FloatKind.FLOAT32), "PTX": ptx}
    compile_for_sm90(monkeypatch)
    sass = _sass(_pixel_pick_probe, parameters, {"num_warps": 4, **INDUCTOR_OPTIONS})
    fmas = [line for line in sass if re.search(r"\bFFMA\b", line)]
    assert bool(fmas) is not ptx, fmas
