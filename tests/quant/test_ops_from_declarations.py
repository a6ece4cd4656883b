"""The declaration is the one source of truth of a fake-quant op: ``libreyolo.quant.fake_quant``
has a plain ``def fake_quant_<q>`` for each declared slot, with the declared signature, calling
``quantizers.<q>`` with its arguments and taking its docstring, and the package exports it."""

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


@pytest.mark.parametrize("slot", DECLARED, ids=lambda slot: slot.name)
def test_each_op_hands_every_argument_to_its_quantizer_under_the_same_name(slot, monkeypatch):
    quantizer = getattr(quantizers, slot.name.removeprefix("fake_quant_"))
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        raise LookupError("the spy stops the call here")

    monkeypatch.setattr(quantizers, quantizer.__name__, spy)
    given = {name: object() for name in slot.signature.parameters}  # defaults given too
    with pytest.raises(LookupError, match="the spy"):
        getattr(fq, slot.name)(**given)
    ((args, kwargs),) = calls
    assert inspect.signature(quantizer).bind(*args, **kwargs).arguments == given


def test_a_declared_slot_without_its_def_is_an_import_error_naming_both():
    slot = _fake_quant("fake_quant_int3_nowhere", "(Tensor x)", "a slot with no def")
    with pytest.raises(ImportError, match=r"slot fake_quant_int3_nowhere .* has no def "
                                          r"fake_quant_int3_nowhere .*quantizers\.int3_nowhere"):
        fq._quantizer_documenting(slot)


def test_a_declared_slot_without_its_quantizer_is_an_import_error_naming_both(monkeypatch):
    def fake_quant_int3_nowhere(x):
        return fq._fake_quant(quantizers.int3_nowhere, x)

    monkeypatch.setattr(fq, "fake_quant_int3_nowhere", fake_quant_int3_nowhere, raising=False)
    slot = _fake_quant("fake_quant_int3_nowhere", "(Tensor x)", "a slot with no quantizer")
    with pytest.raises(ImportError,
                       match=r"slot fake_quant_int3_nowhere .*quantizers\.int3_nowhere"):
        fq._quantizer_documenting(slot)


def test_the_package_exports_every_declared_op():
    exported: dict = {}
    exec("from libreyolo.quant import *", exported)
    for slot in DECLARED:
        assert slot.name in libreyolo.quant.__all__
        assert exported[slot.name] is getattr(fq, slot.name)
    assert {"FAKE_QUANT_OPS", "ste_mask"} <= set(libreyolo.quant.__all__)
