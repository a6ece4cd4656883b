"""A traced launch's kernel writes only what the implementation allocated: torch's own mutation
analysis, run on CPU, for every launch an in-tree traceable implementation hands ``wrap_triton``.

When a compiled graph traces an implementation (``libreyolo.kernels.traced``), functionalization
asks torch which tensors each launched kernel writes (``identify_accessed_tensors`` in torch 2.13,
``identify_mutated_tensors`` in 2.11): it builds the kernel's TTIR and walks back from every store
and atomic. A tensor it names that the slot was given (a graph input) is copied back into it; for
an input that requires grad, AOTAutograd's joint trace then fails ("a leaf Variable that requires
grad is being used in an in-place operation", torch 2.11). Where building the TTIR fails it names
every tensor. Here each launch of the slot's small catalogue case (forward, then the backward with
deterministic algorithms off and on) is recorded on fake tensors, its TTIR is built for an sm_90
target, and no tensor the slot was given may be named. No GPU: the analysis never launches.

Functionalization also copies a tensor a kernel writes as the tensor it is, a view without the
memory around it: a kernel handed part of a buffer it allocated must not reach the rest (the
deterministic MSDA backward read its header before such a view; under inductor its value gradient
came out 2**106 times too large). So every tensor a traced launch is handed that the slot was not
given spans its whole storage.
"""

from __future__ import annotations

import pytest
import torch
from test_operators import slot_inputs
from torch._subclasses.fake_tensor import FakeTensorMode

from libreyolo.capture import tracing_kernels
from libreyolo.kernels import registry, triton_launch
from libreyolo.kernels.providers import IN_TREE

triton = pytest.importorskip("triton")
kernel_wrap = pytest.importorskip("torch._higher_order_ops.triton_kernel_wrap")

TRACEABLE = [(op, impl.name) for op in registry._impls for impl in registry.registered(op)
             if impl.traceable and impl.origin == IN_TREE]


class _Sm90:
    """The active driver's one answer the analysis asks for (the CPU has no CUDA driver)."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


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


def _recorded_launches(op: str, name: str, monkeypatch) -> tuple[list, list[torch.Tensor]]:
    """Every ``(kernel, arguments)`` a traced ``op``/``name`` launches, and the tensors the slot
    was given (skips where it launches no Triton kernel while traced)."""
    impl = next(i for i in registry.registered(op) if i.name == name)
    recorded = []
    monkeypatch.setattr(triton_launch, "_traced_launch",
                        lambda kernel, grid, args, kwargs: recorded.append((kernel, args, kwargs)))
    monkeypatch.setattr(triton.runtime.driver, "_active", _Sm90())
    inputs = _run_traced(op, impl)
    if not recorded:
        pytest.skip(f"{op}/{name} launches no Triton kernel while traced")
    # the positional arguments come first, the constexprs follow by keyword
    return [(kernel, {**dict(zip(kernel.arg_names, args, strict=False)), **kwargs})
            for kernel, args, kwargs in recorded], inputs


def _is_given(tensor: torch.Tensor, inputs: list[torch.Tensor]) -> bool:
    return any(tensor is t or getattr(tensor, "_base", None) is t for t in inputs)


def _written(kernel, arguments: dict) -> set[str]:
    """The arguments torch's analysis says ``kernel`` writes. Building the TTIR is done first on
    its own: the analysis swallows a failure there and names every tensor."""
    ttir, _ = kernel_wrap.generate_ttir(kernel, dict(arguments), {})
    kernel_wrap.ttir_to_functions(ttir)
    if hasattr(kernel_wrap, "identify_accessed_tensors"):  # torch 2.13
        accessed = kernel_wrap.identify_accessed_tensors(kernel, dict(arguments), {})
        return {dep.name for dep in accessed.read_writes.writes}
    return set(kernel_wrap.identify_mutated_tensors(kernel, dict(arguments), {}))


@pytest.mark.parametrize(("op", "name"), TRACEABLE, ids=[f"{op}/{name}" for op, name in TRACEABLE])
def test_a_traced_launch_writes_no_tensor_the_slot_was_given(op, name, monkeypatch):
    launches, inputs = _recorded_launches(op, name, monkeypatch)
    for kernel, arguments in launches:
        given = {k for k, v in arguments.items() if _is_given(v, inputs)}
        wrongly = _written(kernel, arguments) & given
        assert not wrongly, (f"{kernel.fn.__name__}: torch's analysis says it writes "
                             f"{sorted(wrongly)}, tensors the slot was given")


@pytest.mark.parametrize(("op", "name"), TRACEABLE, ids=[f"{op}/{name}" for op, name in TRACEABLE])
def test_a_traced_launch_is_handed_whole_buffers(op, name, monkeypatch):
    launches, inputs = _recorded_launches(op, name, monkeypatch)
    for kernel, arguments in launches:
        for argument, tensor in arguments.items():
            if not isinstance(tensor, torch.Tensor) or _is_given(tensor, inputs):
                continue
            spanned = tensor.numel() * tensor.element_size()
            assert tensor.storage_offset() == 0 and \
                spanned == tensor.untyped_storage().nbytes(), (
                    f"{kernel.fn.__name__}: {argument} is part of a larger buffer (offset "
                    f"{tensor.storage_offset()}, {spanned} of "
                    f"{tensor.untyped_storage().nbytes()} bytes)")
