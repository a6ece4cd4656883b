"""What `bench_compile.py` is judged against (issue 37), in one place: the benchmark prints its
verdicts against these, and `benchmarks/rendering/` renders docs/performance.md's table against
them, so a target cannot differ between a run and the page. Standard library only, like the
tables."""

#: A compiled call within this of the eager call (queued windows), and a reduce-overhead replay
#: within this of the eager call captured by hand.
COMPILED_OVER_EAGER = 1.05
#: The FP8 ViT-L MLP compiled at least this many times as fast as bf16 compiled.
MLP_COMPILED_OVER_BF16 = 1.4
#: At most this many graphs over five sizes with dynamic=True.
MAX_COMPILES = 2
#: A compiled slot call's host time within this of its floor's: the same kernels in a bare
#: ``triton_op`` that no registry reaches (issue 49).
SLOT_OVER_FLOOR_HOST = 1.2
