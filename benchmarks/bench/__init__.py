"""The benchmarks: each script times one area on the GPU against its baseline or peer and writes
the JSON that ``benchmarks/results/`` keeps (``benchmarks/gpu_run.sh`` names the stage)."""
