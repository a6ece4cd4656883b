"""Build the Hub kernel ``kernels-community/deformable-detr`` from its source and lay it out as
the Hub would serve it, for the offline end-to-end run and the evidence matrix on the GPU.

Usage: ``python benchmarks/hub/build_msda.py SOURCE OUT``, where ``SOURCE`` holds
``deformable-detr/`` of ``huggingface/kernels-community`` (Apache-2.0) and a ``COMMIT`` file
naming the commit it came from (``.peers/kernels-community``; never committed here). Writes:

* ``OUT/hf-cache/``: a Hugging Face cache holding the build as
  ``kernels--kernels-community--deformable-detr/snapshots/<revision>/build/<variant>/``, the
  variant named as the ``kernels`` package expects for this torch and CUDA, with its
  ``metadata.json``; the revision is local (a hash of the build), never the upstream pin;
* ``OUT/lock.toml``: a test lock entry pinning that revision and the variant's digest;
* ``OUT/build.json``: source commit, flags, torch and CUDA versions, variant, digest.

The sources target kernel-builder, which supplies ``registration.h`` (the op library's macros)
and builds against a torch that still has ``THC/THCAtomics.cuh``. Both are supplied here by a
binding shim generated in a temporary folder outside the repository; the sources themselves are
compiled unchanged with ``torch.utils.cpp_extension.load``. ``_ops.py`` (kernel-builder's module
that names the op namespace) is generated the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from conformance.evidence.hub_cache import local_revision, lock_text, write_variant  # noqa: E402
from libreyolo.kernels.hub.verify import variant_digest  # noqa: E402

REPO = "kernels-community/deformable-detr"
LOCK_NAME = "deformable-detr"  # the lock's name for the pin (hub_provider.HUB_KERNEL)
EXTENSION = "_deformable_detr_local"
ARCH = "9.0"
CUDA_FLAGS = ("-O3", "-gencode=arch=compute_90,code=sm_90")
CXX_FLAGS = ("-O3",)

# The macros kernel-builder's registration.h provides, as the sources use them: an op library
# named after the extension, and a Python module init so `from . import <extension>` loads it.
REGISTRATION_H = """#pragma once
#include <Python.h>
#define LIBREYOLO_CONCAT_(a, b) a##b
#define LIBREYOLO_CONCAT(a, b) LIBREYOLO_CONCAT_(a, b)
#define LIBREYOLO_STRING_(a) #a
#define LIBREYOLO_STRING(a) LIBREYOLO_STRING_(a)
#define TORCH_LIBRARY_EXPAND(name, module) TORCH_LIBRARY(name, module)
#define REGISTER_EXTENSION(name)                                              \\
  PyMODINIT_FUNC LIBREYOLO_CONCAT(PyInit_, name)() {                           \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,                 \\
                                        LIBREYOLO_STRING(name), nullptr, 0,    \\
                                        nullptr};                              \\
    return PyModule_Create(&module);                                           \\
  }
"""
# THC is gone from current torch; its atomics live in ATen.
THC_ATOMICS = "#pragma once\n#include <ATen/cuda/Atomic.cuh>\n"
OPS_PY = f"""import torch

from . import {EXTENSION}  # noqa: F401 - loading it registers the ops

ops = torch.ops.{EXTENSION}


def add_op_namespace_prefix(op_name: str) -> str:
    return f"{EXTENSION}::{{op_name}}"
"""


def variant_name() -> str:
    """The arch variant the ``kernels`` package looks for with this torch, e.g.
    ``torch211-cxx11-cu130-x86_64-linux`` (kernels/variants.py)."""
    import torch

    major, minor = torch.__version__.split(".")[:2]
    abi = "cxx11" if torch.compiled_with_cxx11_abi() else "cxx98"
    cuda = "cu" + torch.version.cuda.replace(".", "")
    return f"torch{major}{minor}-{abi}-{cuda}-x86_64-linux"


def shim(into: Path) -> Path:
    """The binding shim: registration.h, and THC/THCAtomics.cuh unless torch still has it."""
    from torch.utils.cpp_extension import include_paths

    (into / "THC").mkdir(parents=True)
    (into / "registration.h").write_text(REGISTRATION_H)
    if not any(Path(p, "THC", "THCAtomics.cuh").exists() for p in include_paths()):
        (into / "THC" / "THCAtomics.cuh").write_text(THC_ATOMICS)
    return into


def compile_op(source: Path, work: Path) -> Path:
    """The compiled extension (``<EXTENSION>.so``), built in ``work``."""
    from torch.utils.cpp_extension import load

    os.environ["TORCH_CUDA_ARCH_LIST"] = ARCH
    build = work / "build"
    build.mkdir()
    load(name=EXTENSION,
         sources=[str(source / "torch-ext" / "torch_binding.cpp"),
                  str(source / "deformable_detr" / "ms_deform_attn_cuda.cu")],
         extra_include_paths=[str(source), str(source / "torch-ext"), str(shim(work / "shim"))],
         extra_cflags=list(CXX_FLAGS), extra_cuda_cflags=list(CUDA_FLAGS),
         build_directory=str(build), is_python_module=False, verbose=True)
    return build / f"{EXTENSION}.so"


def variant_files(source: Path, library: Path) -> dict[str, bytes]:
    package = source / "torch-ext" / "deformable_detr"
    metadata = {"id": EXTENSION, "name": "deformable-detr", "version": 1, "license": "Apache-2.0",
                "python-depends": [], "backend": {"type": "cuda"}}
    return {"metadata.json": json.dumps(metadata, indent=1).encode(),
            "deformable_detr/__init__.py": (package / "__init__.py").read_bytes(),
            "deformable_detr/layers.py": (package / "layers.py").read_bytes(),
            "deformable_detr/_ops.py": OPS_PY.encode(),
            f"deformable_detr/{EXTENSION}.so": library.read_bytes()}


def check_variant(build: Path, variant: str) -> None:
    """The ``kernels`` package, where installed, picks this variant for this system."""
    try:
        from kernels.variants import get_variants_local, resolve_variant, variants_trace_str
    except ModuleNotFoundError:
        return
    chosen, trace = resolve_variant(get_variants_local(build))
    if chosen is None or chosen.variant_str != variant:
        raise SystemExit(f"kernels would not load {variant} here:\n{variants_trace_str(trace)}")


def build(peers: Path, out: Path) -> dict:
    import torch

    source = peers / "deformable-detr"
    commit = (peers / "COMMIT").read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="hub-msda-build-"))
    files = variant_files(source, compile_op(source, work))
    variant, digest = variant_name(), variant_digest(files)
    revision = local_revision(files, f"{REPO} built locally from kernels-community@{commit}")
    folder = write_variant(out / "hf-cache", REPO, revision, variant, files,
                           git_addressed=tuple(f for f in files if not f.endswith(".so")))
    check_variant(folder.parent, variant)
    info = {"repo": REPO, "source": "huggingface/kernels-community deformable-detr/ (Apache-2.0)",
            "source_commit": commit, "revision": revision, "variant": variant, "digest": digest,
            "cuda_flags": list(CUDA_FLAGS), "cxx_flags": list(CXX_FLAGS),
            "torch_cuda_arch_list": ARCH, "torch": torch.__version__, "cuda": torch.version.cuda,
            "shim": "registration.h, THC/THCAtomics.cuh and _ops.py generated by "
                    "benchmarks/hub/build_msda.py; sources compiled unchanged",
            "note": "a local build of the Hub kernel's source, not the upstream binary"}
    (out / "lock.toml").write_text(lock_text(
        LOCK_NAME, REPO, revision, {variant: digest},
        comment=f"Test lock: a local build of kernels-community@{commit}, not the upstream pin."))
    (out / "build.json").write_text(json.dumps(info, indent=1))
    return info


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder holding deformable-detr/ and COMMIT")
    parser.add_argument("out", type=Path, help="where hf-cache/, lock.toml, build.json go")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(build(args.source, args.out), indent=1))


if __name__ == "__main__":
    main()
