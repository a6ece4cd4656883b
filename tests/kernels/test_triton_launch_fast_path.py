"""``triton_launch.Launcher``'s direct relaunch, its logic checked on the CPU with a stand-in
kernel, driver and compiled kernel (the real one runs only on CUDA:
``tests/registry/test_triton_launch_cuda.py`` compares its outputs with the reference there).

The stand-ins follow the triton 3.6 internals the module relies on (a kernel's
``device_caches[device][4]`` binder, ``kernel[grid](...)`` returning the compiled kernel, the
compiled kernel's ``run``, and its C ``launch`` when it needs no scratch). What is held: the
relaunch passes the call's tensors' addresses first, then the fixed arguments, and any
difference Triton would specialize, place or hook differently and that a plan does not fix
(16-byte alignment, the current device, tensors on another device, a launch hook, a pre-run
hook) takes Triton's own path instead. Dtypes are the plan's (``Launcher``'s docstring): a
Launcher never sees another dtype, and the tensor arguments must come first.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from libreyolo.kernels import triton_launch


class _Chain:
    def __init__(self):
        self.calls = []


class _Compiled:
    """A compiled kernel whose ``run`` is Triton's Python wrapper (recorded as "wrapper");
    with ``scratch=0`` it also has the C ``launch`` the wrapper calls (recorded as "launch")."""

    function, packed_metadata = "function", "metadata"

    def __init__(self, relaunched, scratch=None):
        self.run = _Run(relaunched) if scratch is None else _LaunchingRun(relaunched, scratch)


class _Run:
    def __init__(self, relaunched):
        self.relaunched = relaunched

    def __call__(self, *args):
        self.relaunched.append(("wrapper", args))


class _LaunchingRun(_Run):
    launch_cooperative_grid, launch_pdl, profile_scratch_size = False, True, 0

    def __init__(self, relaunched, scratch):
        super().__init__(relaunched)
        self.global_scratch_size = scratch

    def launch(self, *args):
        self.relaunched.append(("launch", args))


class _Kernel:
    """Binds ``(a, b, c, n, *, BLOCK)`` as Triton would: tensors specialize on dtype and
    alignment; ``kernel[grid](...)`` is Triton's full path (recorded)."""

    def __init__(self, scratch=None):
        self.full, self.relaunched, self.pre_run_hooks = [], [], []
        self.device_caches = {0: (None, None, None, None, self._bind)}
        self.scratch = scratch

    @staticmethod
    def _bind(a, b, c, n, BLOCK):
        bound = {"a": a, "b": b, "c": c, "n": n}
        spec = [(t.dtype, t.data_ptr() % 16 == 0) for t in (a, b, c)] + [n % 16 == 0]
        return bound, spec, {"BLOCK": BLOCK}

    def __getitem__(self, grid):
        def full_path(*args, **kwargs):
            self.full.append(args)
            return _Compiled(self.relaunched, self.scratch)

        return full_path


def _fake(monkeypatch, scratch):
    runtime = SimpleNamespace(launch_enter_hook=_Chain(), launch_exit_hook=_Chain())
    active = SimpleNamespace(device=0)
    active.get_current_device = lambda: active.device
    active.get_current_stream = lambda device: f"stream{device}"
    driver = SimpleNamespace(active=active)
    monkeypatch.setattr(triton_launch, "_triton", lambda: (runtime, driver))
    monkeypatch.setattr(triton_launch, "_cuda_args", lambda args: True)
    placed = SimpleNamespace(device=0)  # the device every stand-in tensor reports
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: placed.device)
    kernel = _Kernel(scratch)
    launcher = triton_launch.Launcher(kernel, (3,), torch.empty(4), torch.empty(4),
                                      torch.empty(4), 64, BLOCK=128)
    return SimpleNamespace(kernel=kernel, launcher=launcher, runtime=runtime, active=active,
                           placed=placed)


@pytest.fixture
def fake(monkeypatch):
    """A compiled kernel that needs scratch memory: relaunched through Triton's wrapper."""
    return _fake(monkeypatch, scratch=None)


def _tensors(dtype=torch.float32, offset=0):
    base = torch.zeros(64, dtype=dtype)
    return base[offset:offset + 8], torch.ones(8, dtype=dtype), torch.full((8,), 2, dtype=dtype)


def _warm(fake):
    """Two calls through ``launch``: the first compiles (Triton's path) and keeps the compiled
    kernel, the second relaunches it after binding, and the launcher keeps its state."""
    for _ in range(2):
        fake.launcher(*_tensors())
    assert len(fake.kernel.full) == 1 and len(fake.kernel.relaunched) == 1


def test_a_steady_call_relaunches_with_its_own_tensors_addresses_in_place(fake):
    _warm(fake)
    a, b, c = _tensors()
    fake.launcher(a, b, c)
    assert len(fake.kernel.full) == 1 and len(fake.kernel.relaunched) == 2
    how, args = fake.kernel.relaunched[-1]
    assert how == "wrapper"
    assert args[:9] == (3, 1, 1, "stream0", "function", "metadata", None, None, None)
    assert args[9:] == (a.data_ptr(), b.data_ptr(), c.data_ptr(), 64)


def test_without_scratch_memory_the_c_launcher_is_called_directly(monkeypatch):
    fake = _fake(monkeypatch, scratch=0)
    _warm(fake)
    a, b, c = _tensors()
    fake.launcher(a, b, c)
    how, args = fake.kernel.relaunched[-1]
    assert how == "launch"
    # as triton 3.6's CudaLauncher.__call__ calls it: grid, stream, function, cooperative, PDL,
    # the two scratch buffers (none), then its own arguments (metadata, hooks, the kernel's)
    assert args == (3, 1, 1, "stream0", "function", False, True, None, None, "metadata", None,
                    None, None, a.data_ptr(), b.data_ptr(), c.data_ptr(), 64)


def test_scratch_memory_keeps_tritons_wrapper(monkeypatch):
    fake = _fake(monkeypatch, scratch=256)
    _warm(fake)
    fake.launcher(*_tensors())
    assert fake.kernel.relaunched[-1][0] == "wrapper"


@pytest.mark.parametrize("change", ["alignment", "device", "tensor elsewhere",
                                    "enter hook", "exit hook", "pre-run hook"])
def test_what_would_specialize_or_hook_differently_takes_tritons_path(fake, change):
    _warm(fake)
    tensors = _tensors()
    if change == "alignment":
        tensors = _tensors(offset=1)  # 4 bytes off: no longer 16-byte aligned
    elif change == "device":
        fake.active.device = 1
        fake.kernel.device_caches[1] = fake.kernel.device_caches[0]
    elif change == "tensor elsewhere":  # e.g. a CPU tensor: no address the kernel can read
        fake.placed.device = -1
    elif change == "enter hook":
        fake.runtime.launch_enter_hook.calls.append(print)
    elif change == "exit hook":
        fake.runtime.launch_exit_hook = print  # a bare function, as older code assigns one
    else:
        fake.kernel.pre_run_hooks.append(print)
    fake.launcher(*tensors)
    if change == "tensor elsewhere":
        # Triton's own relaunch gets the tensors, whose addresses its launcher checks
        how, args = fake.kernel.relaunched[-1]
        assert args[9:12] == tensors
        return
    assert len(fake.kernel.full) == 2 and len(fake.kernel.relaunched) == 1


def test_a_missing_tensor_is_an_error_not_a_null_pointer(fake):
    _warm(fake)
    a, b, _ = _tensors()
    with pytest.raises(ValueError):
        fake.launcher(a, b)


def test_an_unaligned_tensor_kept_unaligned_still_relaunches_directly(fake):
    """Alignment is compared tensor by tensor: a plan whose first tensor was unaligned at the
    compile keeps relaunching directly while it stays so, and takes Triton's path once it is
    aligned (Triton would specialize differently)."""
    for _ in range(2):
        fake.launcher(*_tensors(offset=1))
    fake.launcher(*_tensors(offset=1))
    assert len(fake.kernel.full) == 1 and len(fake.kernel.relaunched) == 2
    fake.launcher(*_tensors())
    assert len(fake.kernel.full) == 2


def test_a_tensor_after_a_fixed_argument_is_refused_when_the_launcher_is_made():
    with pytest.raises(TypeError, match="tensor arguments must come first"):
        triton_launch.Launcher(_Kernel(), (1,), torch.empty(4), 64, torch.empty(4), BLOCK=8)


def test_the_current_device_is_read_by_torchs_c_call_only_where_it_stands_for_torchs(monkeypatch):
    """A steady call reads the current device through ``torch._C._cuda_getDevice`` when the
    driver's reader is ``torch.cuda.current_device`` (the same value once CUDA is initialized,
    without its lazy-init check); any other reader, a stand-in's or another driver's, is kept."""
    own = lambda: 0  # noqa: E731
    c_call = lambda: 0  # noqa: E731
    monkeypatch.setattr(torch._C, "_cuda_getDevice", c_call, raising=False)
    assert triton_launch._device_reader(torch.cuda.current_device) is c_call
    assert triton_launch._device_reader(own) is own
    monkeypatch.delattr(torch._C, "_cuda_getDevice")
    assert triton_launch._device_reader(torch.cuda.current_device) is torch.cuda.current_device
