"""Hub kernels: compiled kernels published on the Hugging Face Hub, loaded at run time through
the optional ``kernels`` package (``libreyolo[hub-kernels]``), each pinned by the lock
(``hub_kernels.lock.toml``) and verified before anything of it is imported (``verify``).

Importing this package imports neither ``kernels`` nor ``huggingface_hub``; ``loader.load``
does, on the first call that needs a kernel. docs/hub_kernels.md has the policy.
"""

from .lock import LOCK_FILE, HubPin, LockError, load_lock, pin
from .verify import HubKernelRefused, variant_digest

__all__ = ["LOCK_FILE", "HubKernelRefused", "HubPin", "LockError", "load_lock", "pin",
           "variant_digest"]
