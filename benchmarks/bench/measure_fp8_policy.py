"""The FP8 engage policy measured on this card, as the H200's was.

    python benchmarks/bench/measure_fp8_policy.py RESULTS.json [--repeats 50]

``fp8_policy.toml`` lists, per measured device, where the fused FP8 path measured faster there
than the path a finalized FP8 layer declines to (its input's fake quantization, then bf16
``F.linear``); a device it does not list never gets the fused path. The H200's regions came from
``bench_fp8.py``: its GPU checks, then every layer of ``bench_fp8.LAYERS`` timed eager with the L2
flushed (``measure_layer``), a layer engaging where the fused path took at most ``MARGIN`` of
the declined path's time (``YARDSTICK``; the runs behind today's regions, before 2026-12-07,
held it to bf16 ``F.linear`` alone). This script runs exactly those, with the same seed, on the
card it runs on, and none of bench_fp8's other tables (bandwidth, stacks, the 3x3 convolution), so
one ``gpu_run.sh`` stage (``fp8-policy``) fits in about two minutes. The JSON carries the device as
``torch.cuda.get_device_name`` names it (what ``fp8_linear`` matches a ``[[device]]`` table's
name against), the checks, the layers and the card's table they support
(``benchmarks/rendering/fp8_policy.device_table``); ``python -m benchmarks.rendering.fp8_policy
--from RESULTS.json`` turns it into the toml's entry for this card. Without CUDA it writes why
nothing was measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_fake_quant import L2_FLUSH_BYTES  # noqa: E402
from benchmarks.bench.bench_fp8 import (  # noqa: E402 - it selects the FP8 implementations
    LAYERS,
    MARGIN,
    YARDSTICK,
    measure_layer,
    verify,
)
from benchmarks.rendering.fp8_policy import device_table  # noqa: E402
from libreyolo.kernels.quant.execute import fp8_launch  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--repeats", type=int, default=50,
                        help="timed runs per path and layer (bench_fp8.py's default)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        reason = "no CUDA device: the policy is measured on the card it is for"
        print(f"measure_fp8_policy: skipped, {reason}", file=sys.stderr)
        Path(args.results).write_text(json.dumps({"skipped": reason}, indent=1) + "\n")
        return
    import triton

    gen = torch.Generator().manual_seed(0)  # bench_fp8.py's seed, then its order of draws
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    device = torch.cuda.get_device_name()
    result = {"device": device, "capability": list(torch.cuda.get_device_capability()),
              "torch": torch.__version__, "triton": triton.__version__,
              "prologue_hardware_e4m3": fp8_launch.hardware_e4m3(torch.device("cuda")),
              "margin": MARGIN, "yardstick": YARDSTICK, "repeats": args.repeats,
              "verify": verify(gen)}
    print(json.dumps(result["verify"], indent=1))
    layers = []
    for spec in LAYERS:
        layers.append(measure_layer(*spec, args.repeats, flush, gen))
        row = layers[-1]
        print(f"{row['layer']}: bf16 {row['bf16_ms']:.4f} ms, declined {row['declined_ms']:.4f} "
              f"ms, fused {row['fused_ms']:.4f} ms ({row['speedup_declined']:.2f}x the declined "
              f"path), engage {row['engage']}", flush=True)
    result["layers"] = layers
    result["policy"] = device_table(device, layers)
    Path(args.results).write_text(json.dumps(result, indent=1) + "\n")
    print("\n" + result["policy"])


if __name__ == "__main__":
    main()
