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
from traced_launches import TRACEABLE, TRACEABLE_IDS, recorded_launches

triton = pytest.importorskip("triton")
kernel_wrap = pytest.importorskip("torch._higher_order_ops.triton_kernel_wrap")


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


@pytest.mark.parametrize(("op", "name"), TRACEABLE, ids=TRACEABLE_IDS)
def test_a_traced_launch_writes_no_tensor_the_slot_was_given(op, name, monkeypatch):
    launches, inputs = recorded_launches(op, name, monkeypatch)
    for kernel, arguments in launches:
        given = {k for k, v in arguments.items() if _is_given(v, inputs)}
        wrongly = _written(kernel, arguments) & given
        assert not wrongly, (f"{kernel.fn.__name__}: torch's analysis says it writes "
                             f"{sorted(wrongly)}, tensors the slot was given")


@pytest.mark.parametrize(("op", "name"), TRACEABLE, ids=TRACEABLE_IDS)
def test_a_traced_launch_is_handed_whole_buffers(op, name, monkeypatch):
    launches, inputs = recorded_launches(op, name, monkeypatch)
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
