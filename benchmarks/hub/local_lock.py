"""pytest plugin for the GPU evidence run: point the Hub lock at a local build's test lock.

``LIBREYOLO_HUB_LOCAL_BUILD`` names the folder ``benchmarks/hub/build_msda.py`` wrote; load with
``PYTEST_PLUGINS=benchmarks.hub.local_lock`` (an environment variable, so xdist workers load it
too) together with ``HF_HUB_OFFLINE=1 HF_HUB_CACHE=$LIBREYOLO_HUB_LOCAL_BUILD/hf-cache``. The
shipped lock is untouched; this process alone reads the test lock.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

VARIABLE = "LIBREYOLO_HUB_LOCAL_BUILD"


def local_build() -> Path:
    build = os.environ.get(VARIABLE)
    if not build or not Path(build, "lock.toml").is_file():
        raise pytest.UsageError(f"{VARIABLE} must name a folder written by "
                                "benchmarks/hub/build_msda.py (holding lock.toml)")
    return Path(build)


def pytest_configure(config):
    from libreyolo.kernels.hub import lock

    lock.LOCK_FILE = local_build() / "lock.toml"
