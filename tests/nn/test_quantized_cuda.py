"""QAT on a CUDA device is exactly the simulation (issue 38, item 4), and the finalized model's
CUDA output is within its bound (item 3).

- 20 QAT steps of the digits classifier and of the YOLO-like conv stack, per recipe, with
  deterministic algorithms on and the same seed: the default selection (the Triton kernels) and
  ``LIBREYOLO_KERNELS=reference`` give the same loss at every step, bit for bit, and a spy on
  the registry's implementations shows Triton ran every fake-quant call of the first run and the
  reference every one of the second;
- the same under ``torch.compile`` (both runs compiled: the slots as PyTorch operators); this
  needs the slots to be custom operators (issue "The kernels are PyTorch operators"): until
  then a compiled model traces the references' math and the spy sees no Triton call;
- the fake-quantized model on CUDA gives the finalized model's CUDA bits, and the finalized
  model's CUDA output is within the summation-order bound of its CPU (portable) output.

Collected with every test, skipped without CUDA; on the GPU machine (``benchmarks/gpu_run.sh
qat``): ``python -m pytest tests/nn/test_quantized_cuda.py -v -p no:cacheprovider``. The digits
are scikit-learn's when it is installed, else random images of their shape (the check is of the
training step's arithmetic, not of the data).
"""

from __future__ import annotations

import os

# cuBLAS is deterministic only with a fixed workspace; read when a handle is made, so set it
# before this process makes one (gpu_run.sh's stage sets it too)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import collections  # noqa: E402
import contextlib  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import libreyolo.kernels as kernels  # noqa: E402
from benchmarks.bench.qat_models import YoloLikeStack, selection, yolo_batch  # noqa: E402
from examples.digits_qat import DigitsNet, cross_entropy  # noqa: E402
from libreyolo.kernels import KernelDisabledWarning  # noqa: E402
from libreyolo.nn.quantized import calibrate, convert, prepare  # noqa: E402
from libreyolo.quant.fake_quant import FAKE_QUANT_OPS  # noqa: E402

from .quantized_cases import RECIPES_32, assert_same_bits  # noqa: E402
from .slot_calls import slot_calls  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]

STEPS = 20
SELECTIONS = {"kernels": None, "reference": "reference"}


@pytest.fixture(autouse=True)
def _deterministic():
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
             torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.use_deterministic_algorithms(saved[0])
    (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
     torch.backends.cuda.matmul.allow_tf32) = saved[1:]


@contextlib.contextmanager
def spy(count_calls: bool = True):
    """Counts, per fake-quant slot, the calls the layers made through their call sites (unless
    ``count_calls`` is False; ``slot_calls``) and the calls each registered implementation ran
    (its ``fn`` wrapped in place: a bound slot and ``dispatch`` read it on every call, so the
    spy sees what ran, whatever the selection). A compiled model's calls are left uncounted: a
    counter bumped inside the traced code is a guard on its value, so every step would
    recompile (past the limit, under ``fullgraph=True``); the slots' operators run the
    implementations eagerly, where the wrapped ``fn`` counts them."""
    calls, ran = collections.Counter(), collections.Counter()
    restore = []
    for slot in FAKE_QUANT_OPS:
        for impl in kernels.registered(slot):
            fn = impl.fn

            def counted(*args, _fn=fn, _key=(slot, impl.name), **kwargs):
                ran[_key] += 1
                return _fn(*args, **kwargs)

            object.__setattr__(impl, "fn", counted)  # a frozen dataclass: the one field swapped
            restore.append((impl, fn))
    try:
        with slot_calls() if count_calls else contextlib.nullcontext([]) as made:
            yield calls, ran
            calls.update(slot for slot, _ in made)
    finally:
        for impl, original in restore:
            object.__setattr__(impl, "fn", original)


def _digits_data(device):
    try:
        from examples.digits_qat import load_split

        x, y, _, _ = load_split(device)
    except ImportError:  # scikit-learn absent: images of the digits' shape
        generator = torch.Generator(device=device).manual_seed(0)
        x = torch.rand(1347, 1, 8, 8, device=device, generator=generator)
        y = torch.randint(0, 10, (1347,), device=device, generator=generator)
    return [(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(STEPS)]


MODELS = {
    # name: (model factory, skip, batches(device), loss)
    "digits": (DigitsNet, ["stem"], _digits_data, cross_entropy),
    "yolo": (YoloLikeStack, [], lambda device: [yolo_batch(4, device, seed=s)
                                                for s in range(STEPS)], F.mse_loss),
}


def _qat_losses(model_name: str, recipe, compiled: bool = False, device="cuda"):
    make, skip, data, loss_fn = MODELS[model_name]
    torch.manual_seed(0)
    model = make().to(device)
    prepare(model, recipe, skip=skip)
    batches = data(device)
    if recipe.static:
        calibrate(model, [x for x, _ in batches[:2]], progress=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step_model = torch.compile(model, fullgraph=True) if compiled else model
    model.train()
    losses = []
    for x, target in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(step_model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu()


def _compare(model_name, recipe_name, compiled, device="cuda"):
    recipe = RECIPES_32[recipe_name]
    used = {recipe.weight_slot, recipe.activation_slot} - {None}
    losses = {}
    for label, value in SELECTIONS.items():
        if compiled:
            torch._dynamo.reset()
        with selection(value), spy(count_calls=not compiled) as (calls, ran), \
                warnings.catch_warnings():
            warnings.simplefilter("error", KernelDisabledWarning)
            if label == "kernels":
                assert all(kernels.active()[s] == "triton" for s in used), kernels.active()
            losses[label] = _qat_losses(model_name, recipe, compiled, device)
        wanted = "triton" if label == "kernels" else "reference"
        assert {slot for (slot, _), n in ran.items() if n} == used, dict(ran)
        for slot in used:
            assert ran[(slot, wanted)] > 0, (label, slot, dict(ran))
            if not compiled:  # each call of a layer ran once (compiled: the backward reruns)
                assert ran[(slot, wanted)] == calls[slot], (label, slot, dict(ran), calls)
        if not compiled:
            assert set(calls) == used, calls
        assert sum(n for (_, name), n in ran.items() if name != wanted) == 0, dict(ran)
    assert torch.isfinite(losses["kernels"]).all()
    assert_same_bits(losses["kernels"], losses["reference"])


CASES = [pytest.param(m, r, id=f"{m}-{r}") for m in MODELS for r in RECIPES_32]


@pytest.mark.parametrize("model_name, recipe_name", CASES)
def test_qat_steps_with_the_kernels_give_the_reference_losses_bit_for_bit(model_name,
                                                                         recipe_name):
    _compare(model_name, recipe_name, compiled=False)


@pytest.mark.parametrize("model_name, recipe_name", [
    pytest.param(m, r, id=f"{m}-{r}") for m in MODELS
    for r in ("w8a8_int8", "fp8_dynamic", "mxfp4", "nvfp4")])
def test_compiled_qat_steps_with_the_kernels_give_the_reference_losses_bit_for_bit(
        model_name, recipe_name):
    _compare(model_name, recipe_name, compiled=True)


def _single(recipe_name, kind):
    torch.manual_seed(0)
    layer = nn.Linear(256, 96) if kind == "linear" else nn.Conv2d(64, 96, 3, padding=1)
    model = nn.Sequential(layer).eval()
    shape = (8, 50, 256) if kind == "linear" else (4, 64, 20, 20)
    prepare(model, RECIPES_32[recipe_name])
    xs = [torch.randn(shape) * 2 for _ in range(2)]
    if model[0].recipe.static:
        calibrate(model, xs[:1], progress=False)
    return model, xs[1]


@pytest.mark.parametrize("kind", ["linear", "conv"])
@pytest.mark.parametrize("recipe_name", RECIPES_32)
def test_the_finalized_cuda_output_is_the_fake_quantized_cuda_output_and_within_the_bound(
        recipe_name, kind):
    model, x = _single(recipe_name, kind)
    with torch.no_grad():
        cpu_finalized = _converted(model)(x)
        cuda_model = model.cuda()
        fake_cuda = cuda_model(x.cuda())
        finalized = _converted(cuda_model)
        out = finalized(x.cuda())
        out_again = finalized(x.cuda())  # the kept, dequantized-once weight
    assert_same_bits(out.cpu(), fake_cuda.cpu())
    assert_same_bits(out_again.cpu(), fake_cuda.cpu())
    layer = model[0]
    with torch.no_grad():
        xq = layer._quantize_input(x.cuda()).abs()
        wq = layer.fake_quant_weight().abs()
        if kind == "linear":
            magnitude, n = F.linear(xq, wq, layer.bias.abs()), layer.in_features + 1
        else:
            magnitude = F.conv2d(xq, wq, layer.bias.abs(), padding=1)
            n = layer.in_channels * 9 + 1
    u = 2.0**-24
    bound = 2 * n * u / (1 - n * u) * magnitude.cpu() + n * 2.0**-149
    assert ((out.cpu() - cpu_finalized).abs() <= bound).all()


def _converted(model):
    import copy

    finalized = copy.deepcopy(model)
    convert(finalized)
    return finalized
