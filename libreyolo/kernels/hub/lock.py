"""The Hub lock: which revision of which Hub repository a Hub kernel may load, and the audited
digest of each build variant. Read as data (``hub_kernels.lock.toml``) and checked on reading, so
a malformed pin is an error, never a looser pin.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

#: The one lock file. Tests and the local-build evidence run point this attribute elsewhere; the
#: loader reads it on each load, so there is no other setting that changes it.
LOCK_FILE = Path(__file__).with_name("hub_kernels.lock.toml")

REVISION = re.compile(r"[0-9a-f]{40}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


class LockError(ValueError):
    """The lock file does not say what a pin must say."""


@dataclass(frozen=True)
class HubPin:
    """One Hub kernel's pin: repository, commit, and audited digest per build variant."""

    name: str
    repo: str
    revision: str
    variants: dict[str, str]

    def as_dict(self) -> dict:
        return {"repo": self.repo, "revision": self.revision, "variants": dict(self.variants)}


def _checked(name: str, entry: object, where: Path) -> HubPin:
    if not isinstance(entry, dict):
        raise LockError(f"{where}: kernels.{name} must be a table, got {entry!r}")
    repo, revision, variants = entry.get("repo"), entry.get("revision"), entry.get("variants")
    if not isinstance(repo, str) or not REPO.fullmatch(repo):
        raise LockError(f"{where}: kernels.{name}.repo must be 'org/name', got {repo!r}")
    if not isinstance(revision, str) or not REVISION.fullmatch(revision):
        raise LockError(f"{where}: kernels.{name}.revision must be a full 40-hex commit, "
                        f"got {revision!r} (a branch or tag can move)")
    if not isinstance(variants, dict):
        raise LockError(f"{where}: kernels.{name}.variants must be a table of variant = digest, "
                        f"got {variants!r}")
    for variant, digest in variants.items():
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise LockError(f"{where}: kernels.{name}.variants.{variant} must be "
                            f"'sha256:<64 hex>', got {digest!r}")
    unknown = set(entry) - {"repo", "revision", "variants"}
    if unknown:
        raise LockError(f"{where}: kernels.{name} has unknown keys {sorted(unknown)}")
    return HubPin(name, repo, revision, dict(variants))


def load_lock(path: Path | None = None) -> dict[str, HubPin]:
    """Every pin in the lock file (default: :data:`LOCK_FILE`), checked."""
    path = Path(path) if path is not None else LOCK_FILE
    with path.open("rb") as file:
        kernels = tomllib.load(file).get("kernels", {})
    return {name: _checked(name, entry, path) for name, entry in kernels.items()}


def pin(name: str, path: Path | None = None) -> HubPin:
    """The pin of Hub kernel ``name``; a LockError when the lock has none."""
    pins = load_lock(path)
    if name not in pins:
        raise LockError(f"{path or LOCK_FILE} pins no Hub kernel {name!r} "
                        f"(pinned: {', '.join(sorted(pins)) or 'none'})")
    return pins[name]
