"""Floors computed from the shapes over the ceilings measured on the H200 (``CEILINGS``;
docs/architecture.md, "Facts for kernel authors"): bytes over the copy's 4.2 TB/s (read + write),
FLOPs over 777 TFLOP/s (bf16 GEMM) or 1402 TFLOP/s (FP8 ``_scaled_mm``); where both apply, the
larger."""

from __future__ import annotations

import tomllib

from benchmarks.rendering.results import ROOT

FAMILIES = ROOT / "libreyolo" / "kernels" / "attention" / "families.toml"


#: Ceilings measured on the H200 (docs/architecture.md, "Facts for kernel authors").
CEILINGS = {"copy_tb_s": 4.2, "bf16_tflop_s": 777.0, "fp8_tflop_s": 1402.0}


def copy_floor_ms(nbytes: float) -> float:
    return nbytes / (CEILINGS["copy_tb_s"] * 1e12) * 1e3


def gemm_floor_ms(m: int, k: int, n: int, element_bytes: int, tflop_s: float,
                  nbytes: float | None = None) -> float:
    """max(2mkn FLOPs at ``tflop_s``, the operands and the output once at the copy's rate)."""
    if nbytes is None:
        nbytes = (m * k + k * n + m * n) * element_bytes
    return max(2 * m * k * n / (tflop_s * 1e12) * 1e3, copy_floor_ms(nbytes))


def msda_bytes(case: dict) -> tuple[float, float]:
    """Compulsory DRAM bytes of a float32 deformable-attention forward and forward+backward.

    Forward: sampling locations, attention weights and the output once, and value once or, where
    fewer, the corners the samples gather (4 per sample and channel: a decoder's 300 queries
    touch a small part of the encoder's memory). Backward: the output's gradient read, the
    forward's inputs read again, and a gradient written for each of them."""
    levels, heads, ch, batch, q = (case["levels"], case["heads"], case["channels"], case["batch"],
                                   case["queries"])
    points = case["points"]
    samples = sum(points) if isinstance(points, list) else points * len(levels)
    len_in = sum(h * w for h, w in levels)
    value = batch * len_in * heads * ch * 4
    gathered = batch * q * heads * samples * 4 * ch * 4
    touched = min(value, gathered)
    locations = batch * q * heads * samples * 2 * 4
    weights = batch * q * heads * samples * 4
    output = batch * q * heads * ch * 4
    forward = touched + locations + weights + output
    return forward, forward + output + 2 * (touched + locations + weights)


def attention_floor_us(site: dict, kv_tokens: int) -> float:
    """The bare SDPA call's floor, fp16: max(FLOPs of q k^T and p v at 777 TFLOP/s, q, k, v and
    the output once at the copy's rate)."""
    b, n, d = site["batch"], site["tokens"], site["dim"]
    flops = 4 * b * n * kv_tokens * d
    nbytes = 2 * b * d * (2 * n + 2 * kv_tokens)
    return max(flops / (CEILINGS["bf16_tflop_s"] * 1e12), nbytes / (CEILINGS["copy_tb_s"] * 1e12)
               ) * 1e6


def kv_tokens() -> dict[str, int]:
    """Keys per query at each attention call site (families.toml): tokens, tokens over the
    spatial reduction squared, or the learned tokens a global-token site attends to."""
    out = {}
    for family in tomllib.loads(FAMILIES.read_text())["family"]:
        for site in family.get("site", []):
            tokens = site["tokens"]
            if "learned_tokens" in site:
                tokens = site["learned_tokens"]
            elif site.get("sr_ratio", 1) > 1:
                tokens //= site["sr_ratio"] ** 2
            out[f"{family['name']}/{site['name']}"] = tokens
    return out
