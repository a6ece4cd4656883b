"""What an editor and a type checker see of the public API: ``ops.<slot>``'s declared signature and
docstring, the ``ops.pyi`` stub generated from them, and the ``py.typed`` marker that tells a
checker to read the package's own annotations (PEP 561), both shipped in the wheel.

``python tests/packaging/test_typing.py`` rewrites ``libreyolo/kernels/ops.pyi`` after a slot's
declaration changes; the test below fails until it is rewritten and committed.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

from libreyolo.kernels import dispatch, ops, slot_names

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "libreyolo" / "kernels" / "ops.pyi"
HEADER = '''"""Type stub of ``libreyolo.kernels.ops``, one function per slot: generated from
the entry points' signatures and docstrings by ``python tests/packaging/test_typing.py``; do not
edit."""

import torch
'''


def rendered_function(name: str) -> str:
    """``def name(...) -> ...:`` with one parameter a line, and the entry point's docstring."""
    entry = getattr(ops, name)
    signature, lines, keyword_only = inspect.signature(entry), [], False
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            lines.append("    *,")
            keyword_only = True
        lines.append(f"    {parameter},")
    returned = inspect.formatannotation(signature.return_annotation)
    doc = entry.__doc__
    assert '"""' not in doc and "\\" not in doc, f"{name}'s docstring cannot be quoted as is"
    body = "\n".join(f"    {line}" if line else "" for line in doc.splitlines())
    return f"def {name}(\n" + "\n".join(lines) + f'\n) -> {returned}:\n    """\n{body}\n    """\n'


def rendered_stub() -> str:
    return HEADER + "".join(f"\n{rendered_function(name)}" for name in slot_names())


def test_the_stub_is_what_the_entry_points_declare():
    assert STUB.read_text() == rendered_stub(), (
        "libreyolo/kernels/ops.pyi differs from the slots' declarations: run "
        "`python tests/packaging/test_typing.py` and commit it")


def test_an_entry_point_shows_its_declared_parameters_and_explains_itself():
    signature = inspect.signature(ops.fake_quant_fp8)
    assert str(signature) == ("(x: torch.Tensor, scale: torch.Tensor | None = None, *, "
                              "fmt: str = 'e4m3', axis: int | None = None) -> torch.Tensor")
    doc = inspect.getdoc(ops.fake_quant_fp8)
    sections = {title: doc.split(f"\n{title}:\n")[1].split("\n\n")[0]
                for title in ("Args", "Returns", "Raises")}
    for name in ("x (torch.Tensor)", "scale (torch.Tensor | None, default None)",
                 "fmt (str, default 'e4m3')", "axis (int | None, default None)"):
        assert name in sections["Args"]
    assert sections["Returns"].startswith("    torch.Tensor: like('x')")
    assert "NoImplementationError" in sections["Raises"]
    assert "float32, float16, bfloat16" in doc


def test_a_slot_without_a_reference_may_return_none():
    """The caller keeps its portable path when nothing takes the input: the annotation says so."""
    signature = inspect.signature(ops.ms_deform_attn)
    assert str(signature.return_annotation) == "torch.Tensor | None"
    assert "portable path" in ops.ms_deform_attn.__doc__
    assert "NoImplementationError" not in ops.ms_deform_attn.__doc__


def test_the_entry_point_is_still_a_partial_of_dispatch():
    """No wrapper frame per call (ops.py says why): the signature and docstring are attributes."""
    entry = ops.fp8_gemm
    assert type(entry) is functools.partial and entry.func is dispatch and entry.args == (
        "fp8_gemm",)


def test_the_typing_files_exist_and_ship_in_the_wheel():
    from test_package_data import package_data, shipped

    globs = package_data()
    for path in (ROOT / "libreyolo" / "py.typed", STUB):
        assert path.is_file(), path
        assert shipped(path, globs), f"{path.relative_to(ROOT)} is not in pyproject's package-data"


if __name__ == "__main__":
    STUB.write_text(rendered_stub())
