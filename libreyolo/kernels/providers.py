"""Where accelerated implementations come from, imported lazily and independently.

In-tree provider modules register their implementations when imported. Each import is
attempted on its own: a provider that fails to import (a missing optional dependency, a broken
install) never hides the others. A missing optional dependency is silent — it is a fallback, not
an error; any other import failure warns once. Out-of-tree backends come the same way, after
the in-tree ones: each entry point of the group ``libreyolo.kernels`` (its value a module to
import, or a callable to call), then an installed package ``libreyolo_kernels``, which registers
itself.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import types
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager

IN_TREE_PROVIDERS: tuple[str, ...] = (
    "libreyolo.kernels.quant.simulate.triton_provider",
    "libreyolo.kernels.attention.ms_deform_attn.triton_provider",
    "libreyolo.kernels.quant.execute.unpack_provider",
    "libreyolo.kernels.attention.ms_deform_attn.ragged_triton_provider",
    "libreyolo.kernels.quant.execute.fp8_provider",
    # after the Triton one: registered on top, it wins where it is eligible
    "libreyolo.kernels.attention.ms_deform_attn.hub_provider",
)
THIRD_PARTY_PACKAGE = "libreyolo_kernels"
ENTRY_POINT_GROUP = "libreyolo.kernels"
#: Where a registration came from (``Implementation.origin``): a provider of this repository, an
#: entry point, the ``libreyolo_kernels`` package (or one the CLI's ``--import`` names), or any
#: other caller of ``register``.
IN_TREE, ENTRY_POINT, PACKAGE, CALLER = "in-tree", "entry point", "package", "caller"
#: The origins of registrations no code of the process asked for: an installed package found by
#: the registry (or named by the CLI's ``--import``). One that runs a slot in place of an in-tree
#: implementation is announced (``registry.OutOfTreeWarning``).
ANNOUNCED = frozenset({ENTRY_POINT, PACKAGE})
OPTIONAL_DEPENDENCIES = frozenset({"triton", "kernels"})


class ProviderImportWarning(RuntimeWarning):
    """A provider module could not be imported; the others and the references still work."""


def _attempt(what: str, load: Callable[[], object]) -> None:
    try:
        load()
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in OPTIONAL_DEPENDENCIES:
            return
        _warn(what, exc)
    except Exception as exc:  # noqa: BLE001 - a broken provider must not break the others
        _warn(what, exc)


def _import(module: str) -> None:
    _attempt(module, lambda: importlib.import_module(module))


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> None:
    """Its value imported; a callable (``module:function``) is then called, with no argument."""
    loaded = entry_point.load()
    if not isinstance(loaded, types.ModuleType):
        if not callable(loaded):
            raise TypeError(f"entry point {entry_point.value!r} is neither a module nor callable")
        loaded()


def _warn(module: str, exc: BaseException) -> None:
    warnings.warn(
        f"libreyolo.kernels: provider {module} failed to import "
        f"({type(exc).__name__}: {exc}); its implementations are unavailable",
        ProviderImportWarning,
        stacklevel=3,
    )


def import_in_tree(loading: Callable[[str], AbstractContextManager]) -> None:
    """Import the in-tree providers in ``IN_TREE_PROVIDERS`` order, which is their selection
    order (newest registration first): every caller that imports them goes through here."""
    with loading(IN_TREE):
        for module in IN_TREE_PROVIDERS:
            _import(module)


def import_providers(loading: Callable[[str], AbstractContextManager]) -> None:
    """Import every in-tree provider, then the entry points of ``libreyolo.kernels``, then
    ``libreyolo_kernels`` if it is installed; ``loading(origin)`` tags their registrations."""
    import_in_tree(loading)
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        with loading(ENTRY_POINT, _distribution(entry_point)):
            _attempt(f"entry point {entry_point.name} = {entry_point.value}",
                     lambda entry_point=entry_point: _load_entry_point(entry_point))
    if importlib.util.find_spec(THIRD_PARTY_PACKAGE) is not None:
        with loading(PACKAGE, THIRD_PARTY_PACKAGE):
            _import(THIRD_PARTY_PACKAGE)


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    """The installed distribution that declares ``entry_point`` (what a user pip-installed),
    else the module its value names."""
    dist = getattr(entry_point, "dist", None)
    return dist.name if dist is not None else entry_point.module
