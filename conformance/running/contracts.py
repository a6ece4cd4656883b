"""The checks a cell runs, in order, each with the name a negative control cites.

common: `returns-tensor`, `shape`, `dtype`, `device` (equal to the reference's), `inputs-unmodified`
(the whole storage behind every tensor argument, gaps included, keeps its bits);
`exact`: output bits equal the CPU reference's; `ste`: the gradient equals
`torch.where(mask, g, 0)` bit for bit for a random non-unit `g`; `bounded`: error against a float64
oracle at most k x the portable path's own error plus a floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from conformance.inputs.layouts import bits, digest, storage_snapshot
from conformance.schema.bounds import bounded_limit
from conformance.schema.spec import Contract, Inputs

#: What a forward-only implementation usually did: the hint of the checks that find one.
UNCONNECTED = "a body under torch.no_grad, or no straight-through backward"


@dataclass
class Verdict:
    """What the checks found: the names of failed checks, their messages and measurements."""

    failed: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    measurements: dict = field(default_factory=dict)

    def fail(self, check: str, message: str) -> None:
        self.failed.append(check)
        self.messages.append(f"{check}: {message}")

    def explain(self, check: str, context: str) -> None:
        """Add `context` to the message of `check`, if it failed."""
        if check in self.failed:
            i = self.failed.index(check)
            self.messages[i] += f"; {context}"


def hex_bits(t: torch.Tensor) -> str:
    """A one-element tensor's bit pattern in hex, as wide as its dtype (`0x7fc00000`)."""
    width = t.element_size() * 8
    return f"0x{int(bits(t.reshape(1))[0]) & ((1 << width) - 1):0{width // 4}x}"


def element(t: torch.Tensor, index: tuple) -> str:
    """`value (0xbits)` of one element."""
    value = t.detach().cpu()[index]
    shown = value.float() if value.dtype.is_floating_point else value  # float8 has no .item()
    return f"{shown.item()!r} ({hex_bits(value)})"


def ordered(t: torch.Tensor) -> torch.Tensor:
    """Bits mapped to integers whose order is the float order: their difference counts ULPs."""
    b = bits(t).long()
    sign = 1 << (t.element_size() * 8 - 1)
    return torch.where(b < 0, -(b & (sign - 1)), b) if t.element_size() > 1 else b


def compare_bits(actual: torch.Tensor, expected: torch.Tensor) -> dict:
    """Mismatch count, max ULP distance and max abs/rel error over the finite pairs."""
    a, e = bits(actual), bits(expected)
    mismatch = a != e
    out = {"elements": e.numel(), "mismatches": int(mismatch.sum())}
    if out["mismatches"] and actual.dtype.is_floating_point:
        af, ef = actual.detach().cpu().double(), expected.detach().cpu().double()
        finite = torch.isfinite(af) & torch.isfinite(ef)
        err = (af - ef).abs()[finite]
        out["max_abs_err"] = float(err.max()) if err.numel() else None
        rel = err / ef.abs()[finite].clamp_min(torch.finfo(torch.float64).tiny)
        out["max_rel_err"] = float(rel.max()) if rel.numel() else None
        ulps = (ordered(actual) - ordered(expected)).abs().reshape(-1)[finite.reshape(-1)]
        out["max_ulp"] = int(ulps.max()) if ulps.numel() else None
        first = int(mismatch.reshape(-1).nonzero()[0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), e.shape))
        out["first_mismatch"] = {"index": list(index), "actual": element(actual, index),
                                 "expected": element(expected, index)}
    return out


def first_mismatch_text(measured: dict) -> str:
    first = measured["first_mismatch"]
    return (f"first at index {tuple(first['index'])}: {first['actual']} != expected "
            f"{first['expected']}")


def check_common(verdict: Verdict, out, expected, device: str) -> bool:
    """Shape, dtype and device; False when nothing more can be compared. A slot with several
    outputs (a tuple, as its reference returns) is checked part by part."""
    if isinstance(expected, tuple):
        if not isinstance(out, tuple) or len(out) != len(expected):
            verdict.fail("returns-tensor", f"returned {_kind(out)}, expected a tuple of "
                                           f"{len(expected)} tensors")
            return False
        return all([check_common(verdict, o, e, device) for o, e in zip(out, expected,
                                                                        strict=True)])
    if not isinstance(out, torch.Tensor):
        verdict.fail("returns-tensor", f"returned {type(out).__name__}, expected a tensor")
        return False
    if out.shape != expected.shape:
        verdict.fail("shape", f"{tuple(out.shape)} != reference {tuple(expected.shape)}")
    if out.dtype != expected.dtype:
        verdict.fail("dtype", f"{out.dtype} != reference {expected.dtype}")
    if out.device.type != device:
        verdict.fail("device", f"{out.device} != input device {device}")
    return not verdict.failed


def _kind(out) -> str:
    return f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__


def check_inputs_unmodified(verdict: Verdict, inputs: Inputs, before: list[torch.Tensor]):
    changed = [i for i, (t, b) in enumerate(zip(inputs.tensors(), before, strict=True))
               if not torch.equal(storage_snapshot(t), b)]
    if changed:
        verdict.fail("inputs-unmodified", f"tensor arguments {changed} changed (storage bits)")


def check_exact(verdict: Verdict, out, expected) -> None:
    """Bits equal the reference's; for a tuple, each part's (the first differing part named)."""
    parts = tuple(zip(out, expected, strict=True)) if isinstance(expected, tuple) else \
        ((out, expected),)
    for i, (actual, want) in enumerate(parts):
        measured = compare_bits(actual, want)
        if measured["mismatches"] or i == len(parts) - 1:
            break
    verdict.measurements.update(measured)
    verdict.measurements["output_digest"] = digest(out)
    if measured["mismatches"]:
        part = f"output {i}: " if len(parts) > 1 else ""
        verdict.fail("exact", f"{part}{measured['mismatches']} of {measured['elements']} elements "
                              f"differ from the CPU reference's bits, "
                              f"{first_mismatch_text(measured)}")


def check_ste(verdict: Verdict, x: torch.Tensor, out: torch.Tensor, mask: torch.Tensor,
              gen: torch.Generator) -> None:
    """Backpropagate a random non-unit gradient and compare with `where(mask, g, 0)`."""
    g = (torch.rand(out.shape, generator=gen) + 0.5) * torch.where(
        torch.rand(out.shape, generator=gen) < 0.5, -1.0, 1.0)
    g = g.to(out.dtype)
    if out.grad_fn is None:
        verdict.fail("ste", f"output is not connected to the input in autograd ({UNCONNECTED})")
        return
    (grad,) = torch.autograd.grad(out, x, g.to(out.device), allow_unused=True)
    if grad is None:
        verdict.fail("ste", "the output's gradient does not reach the input x (its backward "
                            "returns None for x)")
        return
    want = torch.where(mask, g.to(x.dtype), torch.zeros((), dtype=x.dtype))
    if grad.shape != want.shape or grad.dtype != want.dtype:
        verdict.fail("ste", f"gradient {grad.dtype}{tuple(grad.shape)} != input "
                            f"{want.dtype}{tuple(want.shape)}")
        return
    measured = compare_bits(grad, want)
    verdict.measurements["grad_mismatches"] = measured["mismatches"]
    if measured["mismatches"]:
        verdict.fail("ste", f"{measured['mismatches']} gradient elements differ from "
                            f"where(mask, g, 0), {first_mismatch_text(measured)}")
        verdict.measurements["grad_first_mismatch"] = measured["first_mismatch"]


def check_bounded(verdict: Verdict, contract: Contract, names: list[str], candidate: list,
                  portable: list, oracle: list) -> None:
    """flash-attention's rule per quantity (output, then each gradient), max norms:
    |candidate - oracle| <= k * |portable - oracle| + floor * eps(dtype) * max|oracle|."""
    for name, cand, port, orc in zip(names, candidate, portable, oracle, strict=True):
        eps = torch.finfo(port.dtype).eps
        err = _max_abs(cand.detach().cpu().double() - orc)
        port_err = _max_abs(port.double() - orc)
        floor = contract.floor * eps * _max_abs(orc)
        bound = bounded_limit(port_err, _max_abs(orc), eps, contract.k, contract.floor)
        # the reference side (oracle digest and max, portable error) is what a record's reader
        # re-derives on CPU; the candidate's error is the GPU's word alone
        verdict.measurements[name] = {"max_abs_err": err, "portable_err": port_err,
                                      "oracle_max": _max_abs(orc), "oracle_digest": digest(orc),
                                      "k": contract.k, "floor": floor, "bound": bound}
        if not math.isfinite(bound):
            verdict.fail("bounded", f"{name}: the bound is undefined: the portable path's error "
                                    f"is {port_err} (its result is not finite)")
        elif not err <= bound:
            verdict.fail("bounded", f"{name}: error {err:.3e} > {contract.k} x portable error "
                                    f"{port_err:.3e} + floor {floor:.3e}")


def _max_abs(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0
