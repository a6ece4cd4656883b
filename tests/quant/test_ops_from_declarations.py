"""A fake-quant slot is its declaration and its quantizer: ``libreyolo.quant.fake_quant`` makes the
op ``fake_quant_<q>`` of each declared slot from ``quantizers.<q>``, with the declared signature and
the quantizer's docstring, and the package exports it."""

from __future__ import annotations

import inspect
import pickle
import re

import pytest
import torch

import libreyolo.quant
from libreyolo.kernels.slots import SLOTS, _fake_quant
from libreyolo.quant import fake_quant as fq
from libreyolo.quant import quantizers

DECLARED = [slot for slot in SLOTS if slot.name.startswith("fake_quant_")]


def test_the_ops_are_the_declared_fake_quant_slots_in_their_order():
    assert DECLARED
    assert fq.FAKE_QUANT_OPS == tuple(slot.name for slot in DECLARED)


@pytest.mark.parametrize("slot", DECLARED, ids=lambda slot: slot.name)
def test_each_op_is_a_function_of_the_module_with_the_declared_signature_and_docstring(slot):
    op = slot.load_reference()
    quantizer = getattr(quantizers, slot.name.removeprefix("fake_quant_"))
    assert op is getattr(fq, slot.name)
    assert (op.__module__, op.__name__, op.__qualname__) == (fq.__name__, slot.name, slot.name)
    assert inspect.signature(op) == slot.signature
    assert op.__doc__ and op.__doc__ == quantizer.__doc__
    assert pickle.loads(pickle.dumps(op)) is op


@pytest.mark.parametrize("call, message", [
    (lambda: fq.fake_quant_int8_per_channel(torch.ones(4), torch.ones(4), x_name="w"),
     "fake_quant_int8_per_channel() got an unexpected keyword argument 'x_name'"),
    (lambda: fq.fake_quant_fp8(torch.ones(4), None, "e5m2"),
     "fake_quant_fp8() takes from 1 to 2 positional arguments but 3 were given"),
    (lambda: fq.fake_quant_int8_affine(torch.ones(4), torch.tensor(0.1)),
     "fake_quant_int8_affine() missing 1 required positional argument: 'zero_point'"),
], ids=["unknown-keyword", "keyword-only-given-positionally", "missing-argument"])
def test_a_call_the_signature_does_not_take_is_pythons_own_type_error_naming_the_op(call, message):
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        call()


def test_a_declaration_and_a_quantizer_are_all_a_new_op_needs(monkeypatch):
    def int4_per_tensor(x, scale, *, narrow=True):
        """Symmetric int4 per tensor (a test's quantizer)."""
        qmax = 7 if narrow else 8
        return quantizers.Quantized(*quantizers.quantize(
            x.float(), scale, torch.round, -qmax, qmax))

    monkeypatch.setattr(quantizers, "int4_per_tensor", int4_per_tensor, raising=False)
    slot = _fake_quant("fake_quant_int4_per_tensor",
                       "(Tensor x, Tensor scale, *, bool narrow=True)", "a test's slot")
    op = fq._make_op(slot)
    assert inspect.signature(op) == slot.signature and op.__doc__ == int4_per_tensor.__doc__
    x = torch.tensor([0.3, -0.9, 2.0], requires_grad=True)
    out = op(x, torch.tensor(0.1), narrow=False)
    out.backward(torch.ones(3))
    assert out.tolist() == pytest.approx([0.3, -0.8, 0.8])
    assert x.grad.tolist() == [1.0, 0.0, 0.0]  # straight through, clipped outside [-8, 8] codes


def test_a_declared_slot_without_its_quantizer_is_an_import_error_naming_both():
    slot = _fake_quant("fake_quant_int3_nowhere", "(Tensor x)", "a slot with no quantizer")
    with pytest.raises(ImportError,
                       match=r"slot fake_quant_int3_nowhere .*quantizers\.int3_nowhere"):
        fq._make_op(slot)


def test_the_package_exports_every_declared_op():
    exported: dict = {}
    exec("from libreyolo.quant import *", exported)
    for slot in DECLARED:
        assert slot.name in libreyolo.quant.__all__
        assert exported[slot.name] is getattr(fq, slot.name)
    assert {"FAKE_QUANT_OPS", "ste_mask"} <= set(libreyolo.quant.__all__)
