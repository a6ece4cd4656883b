"""What implementations declare (`libreyolo.kernels.Capabilities`), as the suite reads it.

Out of tree, an implementation is held to the catalogue's expectation for it intersected with its
declaration: a cell outside the declaration is `not-applicable` with the registry's own reason
(`declared unsupported (...)`), counted apart from environment declines, and a decline inside it
still fails. In tree, the catalogue is the bar whatever is declared: a case the catalogue holds
an in-tree implementation to and its declaration leaves out fails (check `declared`), and the
gate fails the declaration itself (`conformance/evidence/gate.py`).
"""

from __future__ import annotations

from conformance.schema.spec import Expectation, SlotSpec

#: The package whose functions are in-tree, whoever registered them.
_PACKAGE = "libreyolo"


def implementation(op: str, name: str):
    """The registered implementation of `op` called `name` (None when there is none)."""
    from libreyolo.kernels import registered

    return next((impl for impl in registered(op) if impl.name == name), None)


def _function_module(fn) -> str:
    module = getattr(fn, "__module__", None) or getattr(getattr(fn, "func", None), "__module__",
                                                        None)
    return module or ""


def is_in_tree(impl) -> bool:
    """A registration the registry counts as in-tree, or whose function comes from the
    `libreyolo` package (any module of it), whoever registered it."""
    from libreyolo.kernels.providers import IN_TREE

    module = _function_module(impl.fn)
    return not impl.is_reference and (impl.origin == IN_TREE or module == _PACKAGE
                                      or module.startswith(f"{_PACKAGE}."))


def binds(impl) -> bool:
    """Whether `impl`'s declaration sets what the suite holds it to: out of tree only."""
    return impl is not None and impl.capabilities is not None and not is_in_tree(impl)


def held_to(spec: SlotSpec, name: str) -> Expectation:
    """The cases implementation `name` is held to: the catalogue's expectation, narrowed by its
    declaration when it is out of tree."""
    impl = implementation(spec.name, name)
    expectation = spec.expectation(name)
    return expectation.within(impl.capabilities) if binds(impl) else expectation


def described(spec: SlotSpec, name: str) -> dict:
    """One implementation's declaration and what it was held to, for the matrix's readers."""
    impl = implementation(spec.name, name)
    declared = impl.capabilities if impl is not None else None
    return {"origin": impl.origin if impl is not None else None,
            "declared": declared.as_dict() if declared is not None else None,
            "bar": "declaration" if binds(impl) else "catalogue",
            "held_to": held_to(spec, name).as_dict()}
