"""Lay a build variant out in a Hugging Face cache the way a download from the Hub does, for
artifacts that never came from the Hub: the CPU tests' stand-in and the GPU evidence run's local
build of the Hub kernel's source. Each file is a blob named by its content address (SHA-256, as
for files stored with Git LFS, or the git blob SHA-1 of the others), and the snapshot folder holds
relative links to the blobs (huggingface_hub, "Manage the cache":
https://huggingface.co/docs/huggingface_hub/guides/manage-cache).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from libreyolo.kernels.hub.verify import cache_folder, git_blob_sha1, sha256_hex, variant_digest


def local_revision(files: dict[str, bytes], label: str) -> str:
    """A 40-hex revision for an artifact that has no Hub commit: a hash of its label and
    digest, so another build gets another revision."""
    return hashlib.sha1(f"{label}\0{variant_digest(files)}".encode()).hexdigest()


def write_variant(cache: Path, repo: str, revision: str, variant: str,
                  files: dict[str, bytes], git_addressed: tuple[str, ...] = ()) -> Path:
    """Write ``files`` as ``snapshots/<revision>/build/<variant>/`` of ``repo`` in ``cache``;
    files named in ``git_addressed`` get git SHA-1 blob names, the rest SHA-256. Returns the
    variant folder."""
    repo_dir = Path(cache) / cache_folder(repo)
    blobs = repo_dir / "blobs"
    variant_dir = repo_dir / "snapshots" / revision / "build" / variant
    blobs.mkdir(parents=True, exist_ok=True)
    for relative, data in sorted(files.items()):
        name = git_blob_sha1(data) if relative in git_addressed else sha256_hex(data)
        (blobs / name).write_bytes(data)
        link = variant_dir / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blobs / name, link.parent))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(revision)
    return variant_dir


def lock_text(name: str, repo: str, revision: str, variants: dict[str, str],
              comment: str = "") -> str:
    """A lock file (libreyolo/kernels/hub/hub_kernels.lock.toml's format) with one pin."""
    rows = ", ".join(f'"{variant}" = "{digest}"' for variant, digest in sorted(variants.items()))
    header = "".join(f"# {line}\n" for line in comment.splitlines())
    return (f'{header}[kernels.{name}]\nrepo = "{repo}"\nrevision = "{revision}"\n'
            f"variants = {{ {rows} }}\n")
