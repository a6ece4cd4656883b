"""Out-of-tree backends found through the ``libreyolo.kernels`` entry-point group, in fresh
interpreters: an installed distribution is a ``*.dist-info`` folder on ``sys.path``."""

from __future__ import annotations

import textwrap

import pytest
from test_imports import run_python

from libreyolo.kernels import settings

ENTRY_POINTS = """\
[libreyolo.kernels]
as_module = ep_backend.as_module
as_callable = ep_backend.setup:register_hub
broken = ep_backend.broken
"""

FILES = {
    "ep_backend/__init__.py": "",
    "ep_backend/as_module.py": """
        from libreyolo.kernels import register
        register("fake_quant_fp8", lambda *a, **k: None, name="epmodule")
        """,
    "ep_backend/setup.py": """
        from libreyolo.kernels import register

        def register_hub():
            register("ms_deform_attn", lambda *a: None, name="ephub")
        """,
    "ep_backend/broken.py": "raise RuntimeError('broken backend')\n",
    "ep_backend-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: ep-backend\nVersion: 0.1\n",
    "ep_backend-0.1.dist-info/entry_points.txt": ENTRY_POINTS,
}


@pytest.fixture
def installed(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


REPORT = """
    import json, sys, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import libreyolo.kernels as k
        lazy = [m for m in sys.modules if m.startswith("ep_backend")]
        origins = {i.name: i.origin for s in ("fake_quant_fp8", "ms_deform_attn")
                   for i in k.registered(s)}
    print(json.dumps({"lazy": lazy, "origins": origins,
                      "imported": sorted(m for m in sys.modules if m.startswith("ep_backend")),
                      "warnings": [str(w.message) for w in caught]}))
    """


def test_entry_points_register_lazily_as_a_module_or_a_callable(installed):
    seen = run_python(REPORT, installed)
    assert seen["lazy"] == []
    assert seen["origins"]["epmodule"] == "entry point"
    assert seen["origins"]["ephub"] == "entry point"
    assert seen["origins"]["thirdparty"] == "package"  # libreyolo_kernels, still found
    assert seen["origins"]["reference"] == "in-tree"
    assert seen["origins"]["triton"] == "in-tree"


def test_a_broken_entry_point_warns_and_hides_nothing(installed):
    seen = run_python(REPORT, installed)
    assert [w for w in seen["warnings"] if "broken backend" in w] != []
    assert "broken" in " ".join(seen["warnings"])
    assert {"epmodule", "ephub"} <= set(seen["origins"])


def test_forced_references_import_no_entry_point(installed):
    seen = run_python(REPORT, installed, {settings.KERNELS: "off"})
    assert seen["imported"] == []
    assert set(seen["origins"]) == {"reference"}
