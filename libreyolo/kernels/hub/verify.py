"""Verify a Hub kernel's build variant in the Hugging Face cache before anything of it runs.

Two checks, both on the bytes that will be imported:

* **the cache's own content addresses.** In the Hugging Face cache a snapshot file is a symlink
  to ``<repo folder>/blobs/<etag>``, and the etag is the file's SHA-256 for files stored with Git
  LFS and its git blob SHA-1 for the others (huggingface_hub, "Manage the cache":
  https://huggingface.co/docs/huggingface_hub/guides/manage-cache). A file whose blob name is
  neither hash of its content was changed after download.
* **the lock's digest** of the variant, where the lock has one: :func:`variant_digest` of every
  file (sorted relative paths and their SHA-256), so a file added, removed or changed shows.

Bytecode (``__pycache__``, ``*.pyc``) is skipped and never copied: the ``kernels`` package never
downloads it (its ``_BYTECODE_IGNORE_PATTERNS``), and Python may write it beside a package that
was imported from the cache before. The verified bytes are what :func:`write_copy` writes, so a
file swapped in the cache after verification cannot be the one imported.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

from .lock import HubPin


class HubKernelRefused(RuntimeError):
    """A Hub kernel's files did not verify, or its pin does not allow them: nothing was run."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_blob_sha1(data: bytes) -> str:
    """Git's object id of a blob: SHA-1 of ``b"blob <size>\\0"`` and the content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def variant_digest(files: dict[str, bytes]) -> str:
    """The digest of a build variant: SHA-256 over ``path\\0sha256(content)\\n`` for each file,
    paths relative to the variant folder with ``/`` separators, in sorted order."""
    lines = b"".join(f"{path}\0{sha256_hex(files[path])}\n".encode()
                     for path in sorted(files))
    return "sha256:" + sha256_hex(lines)


def _is_bytecode(relative: PurePosixPath) -> bool:
    return "__pycache__" in relative.parts or relative.suffix == ".pyc"


def cache_folder(repo: str) -> str:
    """The cache's folder name of a kernel repository (huggingface_hub's ``repo_folder_name``
    for ``repo_type="kernel"``)."""
    return "kernels--" + repo.replace("/", "--")


def _layout_problem(variant_dir: Path, pin: HubPin) -> str | None:
    """Is ``variant_dir`` the pinned revision's ``build/<variant>`` inside this repo's cache?"""
    parts = variant_dir.parts
    if len(parts) < 5 or parts[-2] != "build" or parts[-4] != "snapshots":
        return f"{variant_dir} is not a snapshots/<revision>/build/<variant> folder of the cache"
    if parts[-3] != pin.revision:
        return (f"{variant_dir} belongs to revision {parts[-3]}, the lock pins "
                f"{pin.revision}")
    if parts[-5] != cache_folder(pin.repo):
        return f"{variant_dir} is not in the cache folder of {pin.repo}"
    if variant_dir.is_symlink() or not variant_dir.is_dir():
        return f"{variant_dir} is not a folder of the cache"
    return None


def _blob_bytes(path: Path, blobs: Path, relative: str) -> bytes:
    """The content of one snapshot file, checked against its blob's name."""
    if not path.is_symlink():
        raise HubKernelRefused(f"{relative} is not a link to a cache blob, so its content "
                               "address cannot be checked")
    target = Path(os.path.realpath(path))
    if target.parent != blobs:
        raise HubKernelRefused(f"{relative} links outside the repository's blobs ({target})")
    data = target.read_bytes()
    if target.name not in (sha256_hex(data), git_blob_sha1(data)):
        raise HubKernelRefused(f"{relative}: content does not match its cache address "
                               f"{target.name[:12]} (the file changed after download)")
    return data


def read_verified(variant_dir: Path, pin: HubPin) -> tuple[dict[str, bytes], bool]:
    """(the variant's files by relative path, whether the lock audited this variant).

    Raises :class:`HubKernelRefused` when the folder is not the pinned revision's, a file is not
    its content address, or the lock's digest for this variant differs.
    """
    variant_dir = Path(variant_dir)
    if (problem := _layout_problem(variant_dir, pin)) is not None:
        raise HubKernelRefused(problem)
    blobs = Path(os.path.realpath(variant_dir.parents[3] / "blobs"))
    files: dict[str, bytes] = {}
    for folder, dirs, names in os.walk(variant_dir):
        for name in dirs:
            if Path(folder, name).is_symlink():
                raise HubKernelRefused(f"{Path(folder, name)} is a linked folder")
        for name in names:
            path = Path(folder, name)
            relative = PurePosixPath(path.relative_to(variant_dir).as_posix())
            if not _is_bytecode(relative):
                files[str(relative)] = _blob_bytes(path, blobs, str(relative))
    if "metadata.json" not in files:
        raise HubKernelRefused(f"{variant_dir} has no metadata.json")
    variant = variant_dir.name
    if variant not in pin.variants:
        return files, False
    digest = variant_digest(files)
    if digest != pin.variants[variant]:
        raise HubKernelRefused(f"{pin.repo}@{pin.revision[:12]} variant {variant}: digest "
                               f"{digest[:19]} is not the lock's {pin.variants[variant][:19]}")
    return files, True


def write_copy(files: dict[str, bytes], variant: str, into: Path) -> Path:
    """Write the verified bytes as ``into/build/<variant>/...`` (the Hub layout); return
    ``into``."""
    root = Path(into) / "build" / variant
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return Path(into)
