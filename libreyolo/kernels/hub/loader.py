"""Load a pinned Hub kernel: from the cache (downloading only when it lacks the pinned revision
and ``HF_HUB_OFFLINE`` is not set), verified, and imported from a private copy of the verified
bytes through the ``kernels`` package.

Nothing here runs at import: ``kernels`` (and with it ``huggingface_hub``) is imported by
:func:`load`, which the provider calls on the first call that needs the kernel. ``HF_HUB_OFFLINE``
and ``HF_HUB_CACHE`` are read by ``huggingface_hub`` when it is imported, so they take effect only
when set before that first call.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from types import ModuleType

from libreyolo.kernels import settings

from . import lock
from .verify import HubKernelRefused, read_verified, variant_digest, write_copy


class HubKernelWarning(RuntimeWarning):
    """A Hub kernel loads with less assurance than the lock gives (an unaudited variant)."""


def _cached_variant(pin: lock.HubPin) -> Path:
    """The pinned revision's variant folder for this system in the cache, downloaded into it
    first when the cache lacks it and the Hub is not offline."""
    import kernels
    from huggingface_hub import constants

    try:
        return Path(kernels.install_kernel(pin.repo, revision=pin.revision,
                                           local_files_only=True))
    except FileNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise HubKernelRefused(
                f"{pin.repo}@{pin.revision[:12]} has no build for this system in the cache "
                f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set") from None
    return Path(kernels.install_kernel(pin.repo, revision=pin.revision, local_files_only=False))


#: Private copies of verified kernels, kept (a loaded library stays mapped) until the process
#: ends, when each folder's finalizer removes it.
_PRIVATE: list[tempfile.TemporaryDirectory] = []


#: Imported kernels by the digest of their verified files: a compiled library registers its op
#: namespace once per process, so the same verified bytes loaded again reuse the first import.
_LOADED: dict[str, ModuleType] = {}


def _private_folder() -> Path:
    _PRIVATE.append(tempfile.TemporaryDirectory(prefix="libreyolo-hub-"))
    return Path(_PRIVATE[-1].name)


def load(name: str) -> ModuleType:
    """Import Hub kernel ``name`` as :data:`lock.LOCK_FILE` pins it.

    Raises :class:`HubKernelRefused` (nothing of the kernel ran) when the cache holds no build of
    the pinned revision for this system, a file differs from its cache address or from the
    lock's digest, the variant was never audited (unless ``LIBREYOLO_HUB_KERNELS_UNAUDITED``
    accepts it, with one :class:`HubKernelWarning`), or the kernel declares kernel dependencies
    (which would load unverified).
    """
    import kernels

    pin = lock.pin(name)
    variant_dir = _cached_variant(pin)
    files, audited = read_verified(variant_dir, pin)
    variant = variant_dir.name
    where = f"{pin.repo}@{pin.revision[:12]} variant {variant}"
    if not audited:
        if not settings.hub_unaudited_allowed():
            raise HubKernelRefused(
                f"{where} has no audited digest in {lock.LOCK_FILE.name}; refused "
                f"({settings.HUB_UNAUDITED}=1 accepts it, docs/hub_kernels.md)")
        warnings.warn(f"libreyolo.kernels: loading {where}, which the lock never audited "
                      f"({settings.HUB_UNAUDITED}=1): only the cache's content addresses were "
                      "checked", HubKernelWarning, stacklevel=2)
    metadata = kernels.Metadata.from_bytes(files["metadata.json"])
    if list(metadata.kernel_depends):
        raise HubKernelRefused(f"{where} depends on other kernels, which would load unverified")
    digest = variant_digest(files)
    if digest not in _LOADED:
        _LOADED[digest] = kernels.get_local_kernel(write_copy(files, variant, _private_folder()))
    return _LOADED[digest]
