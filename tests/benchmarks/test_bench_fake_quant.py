"""bench_fake_quant.py's byte count, on the CPU: the GPU run divides by it, so a plan it can no
longer read (a renamed field) or a pass it miscounts must fail here, not in a device call."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from benchmarks.bench.bench_fake_quant import CONFIGS, bytes_moved, make_arguments  # noqa: E402
from libreyolo.kernels.quant.simulate.plan import INLINE_AMAX_TILES, PLANNERS  # noqa: E402

SMALL = (64, 1024)  # one NVFP4 program finds its own amax: one read
LARGE = (4096, 4096)  # more than INLINE_AMAX_TILES programs: an amax pass first


def moved(config, shape) -> tuple[int, int]:
    """(bytes the benchmark counts, the input's bytes) for one of its configurations."""
    _, slot, scale_kind, extra, kwargs, _ = config
    gen = torch.Generator().manual_seed(0)
    args, kwargs = make_arguments(slot, scale_kind, extra, kwargs, shape, gen, device="cpu")
    return bytes_moved(PLANNERS[slot](*args, **kwargs)), args[0].numel() * 4


@pytest.mark.parametrize("config", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_every_configuration_counts_one_write_and_one_or_two_reads(config):
    counted, x_bytes = moved(config, LARGE)
    assert counted in (2 * x_bytes, 3 * x_bytes)


@pytest.mark.parametrize("label, small, large", [
    ("nvfp4 weight", 2, 3),  # the amax pass runs only past INLINE_AMAX_TILES programs
    ("nvfp4 dynamic", 2, 3),
    ("nvfp4 weight, global_amax given", 2, 2),  # no tensor amax to find
    ("int8 per-channel", 2, 2),
])
def test_a_second_read_is_counted_where_an_amax_pass_runs(label, small, large):
    (config,) = [c for c in CONFIGS if c[0] == label]
    assert INLINE_AMAX_TILES * 4096 >= SMALL[0] * SMALL[1]
    for shape, passes in ((SMALL, small), (LARGE, large)):
        counted, x_bytes = moved(config, shape)
        assert counted == passes * x_bytes, (label, shape)
