"""Where accelerated implementations come from, imported lazily and independently.

In-tree provider modules register their implementations when imported. Each import is
attempted on its own: a provider that fails to import (a missing optional dependency, a broken
install) never hides the others. A missing optional dependency is silent — it is a fallback, not
an error; any other import failure warns once. An installed out-of-tree package
``libreyolo_kernels`` is imported the same way and registers itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

IN_TREE_PROVIDERS: tuple[str, ...] = (
    "libreyolo.kernels.quant.simulate.triton_provider",
    "libreyolo.kernels.attention.ms_deform_attn.triton_provider",
    "libreyolo.kernels.attention.ms_deform_attn.ragged_triton_provider",
)
THIRD_PARTY_PACKAGE = "libreyolo_kernels"
OPTIONAL_DEPENDENCIES = frozenset({"triton", "kernels"})


class ProviderImportWarning(RuntimeWarning):
    """A provider module could not be imported; the others and the references still work."""


def _import(module: str) -> None:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in OPTIONAL_DEPENDENCIES:
            return
        _warn(module, exc)
    except Exception as exc:  # noqa: BLE001 - a broken provider must not break the others
        _warn(module, exc)


def _warn(module: str, exc: BaseException) -> None:
    warnings.warn(
        f"libreyolo.kernels: provider {module} failed to import "
        f"({type(exc).__name__}: {exc}); its implementations are unavailable",
        ProviderImportWarning,
        stacklevel=3,
    )


def import_providers() -> None:
    """Import every in-tree provider, then ``libreyolo_kernels`` if it is installed."""
    for module in IN_TREE_PROVIDERS:
        _import(module)
    if importlib.util.find_spec(THIRD_PARTY_PACKAGE) is not None:
        _import(THIRD_PARTY_PACKAGE)
