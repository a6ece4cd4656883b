"""Where a compiled slot call's time goes, on a CUDA GPU: the host side and the kernels.

Usage: ``python benchmarks/profile_compile.py OUT.txt``

``bench_compile.py`` measures compiled calls slower than eager (a fake-quant call's host time
~4x eager's, the FP8 ViT-L MLP compiled slower than eager); this says why, for the next change:
- the host: cProfile of 2,000 calls of ``ops.fake_quant_fp8`` (16384x1024 bf16, inference)
  eager and compiled, by cumulative time;
- the device: ``torch.profiler`` of the FP8 ``FinalizedMLP`` (16384 tokens) eager and compiled,
  each kernel's name, count and total CUDA time, so a copy that compile added shows by name;
- the FP8 MLP's host side, eager and compiled (cProfile of ``MLP_CALLS`` calls): the compiled
  MLP ran the eager kernels (325 µs of GPU time a call) yet took 485 µs a call in queued
  windows against eager's 394, so its host time per call is the suspect.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_host import profile_table  # noqa: E402
from libreyolo.kernels import ops  # noqa: E402

CALLS = 2000
MLP_CALLS = 200


def host_profile(fn, x, calls: int = CALLS) -> str:
    for _ in range(50):  # compiled, planned, warm
        fn(x)
    torch.cuda.synchronize()
    return profile_table(lambda: fn(x), calls, sort="cumulative", rows=30)


def kernel_table(model, x) -> str:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        model(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=20)


def main(out: str) -> None:
    parts = []
    x = torch.randn(16384, 1024, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        compiled = torch.compile(lambda t: ops.fake_quant_fp8(t))
        for name, fn in (("eager", lambda t: ops.fake_quant_fp8(t)), ("compiled", compiled)):
            parts.append(f"## host: ops.fake_quant_fp8 {name}, {CALLS} calls\n"
                         f"{host_profile(fn, x)}")
        from libreyolo.nn.finalized import FinalizedLinear, FinalizedMLP

        torch.manual_seed(0)
        fc1, fc2 = torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)
        mlp = FinalizedMLP(FinalizedLinear.from_float(fc1, "fp8", "fp8_dynamic"),
                           FinalizedLinear.from_float(fc2, "fp8", "fp8_dynamic")).to("cuda").eval()
        from libreyolo.kernels.quant.execute import fp8_linear

        layers = [(m.codes, m.scale, m.bias) for m in (mlp.fc1, mlp.fc2)]
        parts.append(f"## the FP8 MLP's path: policy engages "
                     f"{fp8_linear._policy_engages(x, layers[0][0], layers[1][0])}, folded path "
                     f"{'declined' if fp8_linear.fused_fp8_mlp(x, *layers) is None else 'runs'}")
        for name, model in (("eager", mlp), ("compiled", torch.compile(mlp))):
            parts.append(f"## kernels: FP8 FinalizedMLP {name}, 10 calls\n{kernel_table(model, x)}")
            parts.append(f"## host: FP8 FinalizedMLP {name}, {MLP_CALLS} calls\n"
                         f"{host_profile(model, x, MLP_CALLS)}")
    text = "\n\n".join(parts)
    Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1])
