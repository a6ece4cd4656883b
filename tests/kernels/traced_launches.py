"""The Triton launches an in-tree traceable implementation hands ``wrap_triton`` while a compiled
graph traces it, recorded on CPU: the slot's small catalogue case runs on fake tensors (forward,
then the backward with deterministic algorithms off and on) and every launch is recorded instead
of traced. Kernels are then built for an sm_90 target with no GPU (torch's analysis and Triton's
compiler both ask the driver only for its target)."""

from __future__ import annotations

import pytest
import torch
from test_operators import slot_inputs
from torch._subclasses.fake_tensor import FakeTensorMode

from libreyolo.capture import tracing_kernels
from libreyolo.kernels import ptx, registry, triton_launch
from libreyolo.kernels.providers import IN_TREE
from libreyolo.kernels.quant.execute import fp8_launch

TRACEABLE = [(op, impl.name) for op in registry._impls for impl in registry.registered(op)
             if impl.traceable and impl.origin == IN_TREE]
TRACEABLE_IDS = [f"{op}/{name}" for op, name in TRACEABLE]


class _Sm90:
    """The active driver's one answer the analysis and the compiler ask for (the CPU has no CUDA
    driver)."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


def compile_for_sm90(monkeypatch) -> None:
    """Triton compiles for an sm_90 target from here on in the test (no GPU needed)."""
    import triton

    monkeypatch.setattr(triton.runtime.driver, "_active", _Sm90())


def _run_traced(op: str, impl) -> list[torch.Tensor]:
    """Run ``impl`` on the slot's small case as a compiled graph traces it (fake tensors), its
    backward too, with deterministic algorithms off and on; the tensors the slot was given (the
    upstream gradient too)."""
    args, kwargs = slot_inputs(op, "cpu")
    with FakeTensorMode(allow_non_fake_inputs=True), tracing_kernels(), torch.no_grad():
        given = [torch.empty_like(a) if isinstance(a, torch.Tensor) else a for a in args]
        plan = impl.accepts(*given, **kwargs) if impl.accepts is not None else None
        assert not isinstance(plan, str), plan
        prepared = {} if plan is None else {"prepared": plan}
        out = impl.fn(*given, **prepared, **kwargs)
        first = out[0] if isinstance(out, tuple) else out
        inputs = [a for a in given if isinstance(a, torch.Tensor)]
        if impl.backward is not None:
            grad = torch.empty_like(first)
            inputs.append(grad)
            before = torch.are_deterministic_algorithms_enabled()
            try:
                for deterministic in (False, True):
                    torch.use_deterministic_algorithms(deterministic, warn_only=True)
                    impl.backward(grad, *given, **prepared, **kwargs)
            finally:
                torch.use_deterministic_algorithms(before)
    return inputs


def recorded_launches(op: str, name: str, monkeypatch, *, none_skips: bool = True
                      ) -> tuple[list, list[torch.Tensor]]:
    """Every ``(kernel, arguments)`` a traced ``op``/``name`` launches (``arguments``: the
    kernel's parameters by name, then the launch options), and the tensors the slot was given;
    skips where it launches no Triton kernel while traced, unless ``none_skips`` is false."""
    impl = next(i for i in registry.registered(op) if i.name == name)
    recorded = []
    monkeypatch.setattr(triton_launch, "_traced_launch",
                        lambda kernel, grid, args, kwargs: recorded.append((kernel, args, kwargs)))
    compile_for_sm90(monkeypatch)
    # the launches an sm_90 device makes: the FP8 prologue takes its E4M3 conversion instruction,
    # uncontracted multiplies their PTX
    monkeypatch.setattr(fp8_launch, "hardware_e4m3", lambda device: True)
    monkeypatch.setattr(ptx, "compiles_to_ptx", lambda device: True)
    inputs = _run_traced(op, impl)
    if not recorded and none_skips:
        pytest.skip(f"{op}/{name} launches no Triton kernel while traced")
    # the positional arguments come first, the constexprs follow by keyword
    return [(kernel, {**dict(zip(kernel.arg_names, args, strict=False)), **kwargs})
            for kernel, args, kwargs in recorded], inputs
