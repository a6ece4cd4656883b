"""Profile the host time of eager deformable-attention calls by owner, alone
(``bench_ms_deform_attn.py`` writes the same profile beside its JSON); ``msda_host_profile.py``
says what the groups are.

    python benchmarks/profiles/profile_ms_deform_attn.py OUT.md [--case deformable_detr_decoder] \
        [--calls 300]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_ms_deform_attn import PEER_VARIABLE, load_peer, profiled_steps  # noqa: E402
from benchmarks.profiles.msda_host_profile import DEFAULT_CASES, profile_cases  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import load_cases  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the markdown tables")
    parser.add_argument("--case", action="append", help="shape-set case names "
                        f"(default: {', '.join(DEFAULT_CASES)})")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args(argv)
    names = args.case or DEFAULT_CASES
    cases = [c for c in load_cases() if c.name in names]
    if len(cases) != len(names):
        raise SystemExit(f"--case: unknown name in {names}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    peer = load_peer()[0] if device == "cuda" else None
    args.out.write_text(profile_cases(cases, functools.partial(profiled_steps, peer=peer),
                                      getattr(torch, args.dtype), device, args.calls,
                                      peer=os.environ.get(PEER_VARIABLE) if peer else None))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
