"""The lock and the verification, through the real ``kernels`` package, offline: what the lock
pins loads from a verified private copy; anything else is refused before it is imported."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path

import hub_stand_in as stand_in
import pytest

from conformance.evidence.hub_cache import lock_text
from libreyolo.kernels import settings
from libreyolo.kernels.hub import HubKernelRefused, LockError, lock, verify
from libreyolo.kernels.hub import loader as hub_loader
from libreyolo.kernels.hub.loader import HubKernelWarning

V1_5_0_PIN = "4d2393e5d7879f7cf68db04cc7c9c7342272bc05"  # the text, LibreYOLO v1.5.0


def load():
    return hub_loader.load(stand_in.NAME)


def imported_from(module) -> Path:
    return Path(module.__file__).resolve()


def test_the_shipped_lock_pins_v1_5_0s_revision_and_audits_no_variant():
    pins = lock.load_lock(lock.LOCK_FILE)
    assert pins["deformable-detr"].repo == "kernels-community/deformable-detr"
    assert pins["deformable-detr"].revision == V1_5_0_PIN
    assert pins["deformable-detr"].variants == {}  # no record, no digest: nothing fabricated


@pytest.mark.parametrize("field, value, match", [
    ("revision", "main", "revision must be a full 40-hex commit"),
    ("revision", V1_5_0_PIN[:12], "revision must be a full 40-hex commit"),
    ("repo", "deformable-detr", "repo must be 'org/name'"),
])
def test_a_pin_that_could_move_is_an_error(tmp_path, field, value, match):
    entry = {"repo": "kernels-community/deformable-detr", "revision": V1_5_0_PIN, field: value}
    path = tmp_path / "lock.toml"
    path.write_text(lock_text("k", entry["repo"], entry["revision"], {}))
    with pytest.raises(LockError, match=match):
        lock.load_lock(path)


def test_a_digest_must_say_its_algorithm(tmp_path):
    path = tmp_path / "lock.toml"
    path.write_text(lock_text("k", "org/k", V1_5_0_PIN, {"torch-cpu": "0" * 64}))
    with pytest.raises(LockError, match="variants.torch-cpu must be 'sha256:<64 hex>'"):
        lock.load_lock(path)


def test_the_pinned_audited_stand_in_loads_from_a_private_copy_of_the_verified_bytes(hub):
    module = load()
    assert hasattr(module, "ms_deform_attn_forward")
    where = imported_from(module)
    assert hub.cache.resolve() not in where.parents  # not imported from the cache
    assert where.read_bytes() == stand_in.files()["deformable_detr/__init__.py"]


def test_a_changed_blob_is_refused_before_import(hub):
    blob = (hub.folder / "deformable_detr" / "__init__.py").resolve()
    blob.write_bytes(blob.read_bytes() + b"\nraise SystemExit('tampered code ran')\n")
    with pytest.raises(HubKernelRefused, match="does not match its cache address"):
        load()


def test_a_consistently_rewritten_cache_is_refused_by_the_lock_digest(hub):
    """An attacker who rewrites a file and its blob name passes the cache's check, not the
    lock's: a build with one more line, written under the pinned revision."""
    shutil.rmtree(hub.cache)
    stand_in.build(hub.cache, marker="\nTAMPERED = True\n", revision=hub.revision)
    with pytest.raises(HubKernelRefused, match="is not the lock's"):
        load()


def test_a_file_that_is_not_a_cache_link_is_refused(hub):
    path = hub.folder / "deformable_detr" / "__init__.py"
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    with pytest.raises(HubKernelRefused, match="not a link to a cache blob"):
        load()


def test_an_added_file_is_refused_by_the_lock_digest(hub):
    blob = hub.folder.parents[3] / "blobs" / verify.sha256_hex(b"x = 1\n")
    blob.write_bytes(b"x = 1\n")
    (hub.folder / "extra.py").symlink_to(os.path.relpath(blob, hub.folder))
    with pytest.raises(HubKernelRefused, match="is not the lock's"):
        load()


def test_another_revision_in_the_cache_is_never_loaded(hub):
    hub.pin(revision="f" * 40)
    with pytest.raises(HubKernelRefused, match="no build for this system in the cache"):
        load()


def test_a_variant_the_lock_never_audited_is_refused_by_default(hub):
    hub.pin(variants={})
    with pytest.raises(HubKernelRefused, match="no audited digest"):
        load()


def test_the_unaudited_setting_accepts_it_with_one_warning(hub, monkeypatch):
    hub.pin(variants={})
    monkeypatch.setenv(settings.HUB_UNAUDITED, "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = load()
    assert [w.category for w in caught if w.category is HubKernelWarning] == [HubKernelWarning]
    assert hasattr(module, "ms_deform_attn_forward")


def test_the_unaudited_setting_does_not_accept_a_changed_blob(hub, monkeypatch):
    hub.pin(variants={})
    monkeypatch.setenv(settings.HUB_UNAUDITED, "1")
    blob = (hub.folder / "deformable_detr" / "__init__.py").resolve()
    blob.write_bytes(blob.read_bytes() + b"\n# changed\n")
    with pytest.raises(HubKernelRefused, match="does not match its cache address"):
        load()


def test_local_kernels_cannot_redirect_the_load(hub, tmp_path, monkeypatch):
    """LOCAL_KERNELS names an unverified folder for the pinned repository: ignored, the
    verified copy loads; and with a changed cache, the load is refused rather than redirected."""
    local = tmp_path / "local"
    files = stand_in.files(marker="\nUNVERIFIED = True\n")
    for relative, data in files.items():
        (local / "build" / stand_in.VARIANT / relative).parent.mkdir(parents=True, exist_ok=True)
        (local / "build" / stand_in.VARIANT / relative).write_bytes(data)
    monkeypatch.setenv("LOCAL_KERNELS", f"{stand_in.REPO}={local}")
    module = load()
    assert not hasattr(module, "UNVERIFIED")
    blob = (hub.folder / "metadata.json").resolve()
    blob.write_bytes(blob.read_bytes().replace(b"Apache-2.0", b"MIT"))
    with pytest.raises(HubKernelRefused):
        load()


def test_a_file_swapped_after_verification_is_not_the_one_imported(hub, monkeypatch):
    """The import reads the verified bytes (a private copy), not the cache again."""
    verified = verify.read_verified

    def verify_then_swap(variant_dir, pin):
        result = verified(variant_dir, pin)
        blob = (Path(variant_dir) / "deformable_detr" / "__init__.py").resolve()
        blob.write_bytes(b"raise SystemExit('swapped code ran')\n")
        return result

    monkeypatch.setattr(hub_loader, "read_verified", verify_then_swap)
    assert hasattr(load(), "ms_deform_attn_forward")


def test_a_refused_kernel_is_never_imported(hub):
    blob = (hub.folder / "deformable_detr" / "__init__.py").resolve()
    blob.write_bytes(b"import sys\nsys.modules['hub_tamper_ran'] = True\n")
    with pytest.raises(HubKernelRefused):
        load()
    assert "hub_tamper_ran" not in sys.modules


def test_loading_again_reuses_the_import_but_verifies_again(hub):
    """A compiled library registers its ops once per process, so the same verified bytes reuse
    the first import; the cache is still verified on every load."""
    first = load()
    assert load() is first
    blob = (hub.folder / "deformable_detr" / "__init__.py").resolve()
    blob.write_bytes(blob.read_bytes() + b"\n# changed\n")
    with pytest.raises(HubKernelRefused):
        load()
