"""Build Deformable DETR's compiled ``MultiScaleDeformableAttention`` op from a source checkout.

Usage: ``python benchmarks/peers/build_deformable_detr.py SOURCE [--build-dir DIR]``, where
``SOURCE`` holds ``models/ops`` of ``fundamentalvision/Deformable-DETR`` (Apache-2.0), and
optionally a ``COMMIT`` file naming the commit it came from. Nothing of it is committed here:
the sources are copied to a temporary folder, brought up to date for current PyTorch and nvcc
13 (the edits below), and compiled with ``torch.utils.cpp_extension.load``.
``load_op(SOURCE)`` returns the op's module and the commit;
``benchmarks/bench/bench_ms_deform_attn.py`` calls it when ``LIBREYOLO_PEER_DEFORMABLE_DETR`` is
set.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

# Deprecated ATen spellings of 2020 and what replaces them. Order matters: ``.type().is_cuda()``
# goes before the general ``.type()``.
MODERNIZE = (
    (re.compile(r"\.type\(\)\.is_cuda\(\)"), ".is_cuda()"),
    (re.compile(r"\.type\(\)"), ".scalar_type()"),
    (re.compile(r"\.data<([A-Za-z0-9_:]+)>\(\)"), r".data_ptr<\1>()"),
    (re.compile(r"#include\s*<THC/THCAtomics\.cuh>"), "#include <ATen/cuda/Atomic.cuh>"),
    (re.compile(r"\bAT_ASSERTM\("), "TORCH_CHECK("),
    (re.compile(r"\bAT_ERROR\("), "TORCH_CHECK(false, "),
)
SUFFIXES = (".h", ".cuh", ".cpp", ".cu")


def modernize(text: str) -> str:
    for pattern, replacement in MODERNIZE:
        text = pattern.sub(replacement, text)
    return text


def prepared_sources(source: Path, into: Path) -> list[Path]:
    """Copy ``models/ops/src`` of ``source`` into ``into``, modernized; return what to compile."""
    src = source / "models" / "ops" / "src"
    if not src.is_dir():
        raise FileNotFoundError(f"source: {src} not found (expected a Deformable-DETR checkout "
                                "holding models/ops)")
    shutil.copytree(src, into / "src")
    for path in (into / "src").rglob("*"):
        if path.suffix in SUFFIXES:
            path.write_text(modernize(path.read_text()))
    return sorted(p for p in (into / "src").rglob("*") if p.suffix in (".cpp", ".cu"))


def source_commit(source: Path) -> str | None:
    commit = source / "COMMIT"
    return commit.read_text().strip() if commit.is_file() else None


def load_op(source: str | Path, build_dir: str | Path | None = None, verbose: bool = False):
    """(the compiled module with ``ms_deform_attn_forward``/``_backward``, source commit)."""
    from torch.utils.cpp_extension import load

    source = Path(source)
    work = Path(tempfile.mkdtemp(prefix="deformable-detr-op-"))
    sources = prepared_sources(source, work)
    build = Path(build_dir) if build_dir else work / "build"
    build.mkdir(parents=True, exist_ok=True)
    module = load(
        name="MultiScaleDeformableAttention",
        sources=[str(p) for p in sources],
        extra_include_paths=[str(work / "src")],
        extra_cflags=["-O3", "-DWITH_CUDA"],
        extra_cuda_cflags=["-O3", "-DWITH_CUDA", "-DCUDA_HAS_FP16=1",
                           "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                           "-D__CUDA_NO_HALF2_OPERATORS__"],
        build_directory=str(build),
        verbose=verbose,
    )
    return module, source_commit(source)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder holding models/ops (and COMMIT)")
    parser.add_argument("--build-dir", type=Path, help="where the compiled op goes")
    args = parser.parse_args(argv)
    module, commit = load_op(args.source, args.build_dir, verbose=True)
    print(f"built {module.__file__} from Deformable-DETR commit {commit or 'unknown'}")


if __name__ == "__main__":
    main()
