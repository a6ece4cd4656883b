"""What importing and resolving pulls in, checked in fresh interpreters through sys.modules."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from libreyolo.kernels import providers, registry, settings

THIRD_PARTY = textwrap.dedent(
    """
    from libreyolo.kernels import register
    register("ms_deform_attn", lambda *a, **k: None, name="thirdparty")
    """
)

# How an absent package looks to importers: ``import triton`` raises ModuleNotFoundError and
# ``importlib.util.find_spec("triton")`` returns None.
BLOCK_TRITON = textwrap.dedent(
    """
    import sys
    sys.modules["triton"] = None
    sys.modules["kernels"] = None
    """
)


def run_python(code: str, tmp_path, env_extra=None) -> dict:
    """Run ``code`` in a fresh interpreter whose last line prints a JSON object; return it."""
    package = tmp_path / "libreyolo_kernels"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(THIRD_PARTY)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), **(env_extra or {})}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_registry_imports_neither_triton_nor_kernels(tmp_path):
    seen = run_python(
        """
        import json, sys
        import libreyolo.kernels, libreyolo.kernels.ops
        print(json.dumps({m: m in sys.modules for m in ("triton", "kernels", "libreyolo_kernels")}))
        """,
        tmp_path,
    )
    assert seen == {"triton": False, "kernels": False, "libreyolo_kernels": False}


@pytest.mark.parametrize("value", ["off", "reference"])
def test_forced_reference_imports_no_provider(tmp_path, value):
    seen = run_python(
        """
        import json, sys
        import libreyolo.kernels as k
        from libreyolo.kernels.providers import IN_TREE_PROVIDERS
        active = k.active()
        names = list(IN_TREE_PROVIDERS) + ["libreyolo_kernels", "triton"]
        print(json.dumps({"imported": [m for m in names if m in sys.modules], "active": active}))
        """,
        tmp_path,
        {settings.KERNELS: value},
    )
    assert seen["imported"] == []
    assert set(seen["active"].values()) <= {"reference", "unavailable"}


def test_the_third_party_package_registers_itself(tmp_path):
    seen = run_python(
        """
        import json, sys
        import libreyolo.kernels as k
        print(json.dumps({"active": k.active()["ms_deform_attn"],
                          "imported": "libreyolo_kernels" in sys.modules}))
        """,
        tmp_path,
    )
    assert seen == {"active": "thirdparty", "imported": True}


def test_everything_resolves_with_triton_absent_and_no_cuda(tmp_path):
    seen = run_python(
        BLOCK_TRITON
        + """
import json, warnings
import torch
torch.cuda.is_available = lambda: False
warnings.simplefilter("error")
import libreyolo.kernels as k
print(json.dumps(k.active()))
""",
        tmp_path,
    )
    assert seen["fake_quant_fp8"] == "reference"
    assert seen["ms_deform_attn"] == "thirdparty"


def test_a_broken_provider_warns_and_does_not_hide_the_others(
    clean_registry, tmp_path, monkeypatch
):
    (tmp_path / "broken_provider.py").write_text("raise RuntimeError('bad install')\n")
    (tmp_path / "needs_triton_provider.py").write_text("import triton.nonexistent_module\n")
    (tmp_path / "good_provider.py").write_text(
        "from libreyolo.kernels import register\n"
        "register('ms_deform_attn', lambda *a: 'good', name='good')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        providers,
        "IN_TREE_PROVIDERS",
        ("broken_provider", "needs_triton_provider", "good_provider"),
    )
    monkeypatch.setattr(providers, "THIRD_PARTY_PACKAGE", "no_such_package_here")
    monkeypatch.setattr(registry, "_providers_started", False)
    monkeypatch.setattr(registry, "_providers_loaded", False)
    with pytest.warns(providers.ProviderImportWarning, match="broken_provider.*bad install") as rec:
        assert registry.resolve("ms_deform_attn").implementation.name == "good"
    assert len(rec) == 1, "a missing optional dependency (triton) must not warn"


def test_a_registration_made_before_the_first_resolution_is_newer_than_in_tree_ones(tmp_path):
    seen = run_python(
        """
        import json
        from libreyolo.kernels import register, registered
        register("fake_quant_fp8", lambda *a, **k: None, name="mine")
        print(json.dumps([i.name for i in registered("fake_quant_fp8")]))
        """,
        tmp_path,
    )
    assert seen[0] == "mine" and seen[-1] == "reference"
    assert "triton" in seen
