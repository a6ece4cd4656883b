"""Quantize a small convolutional classifier on scikit-learn's bundled digits, offline.

    pip install -q torch==2.13.0 -e '.[examples]'   # scikit-learn: the digits ship inside it
    python examples/digits_qat.py [--json OUT.json] [--epochs 40] [--qat-epochs 6]

Float training, then per recipe simulated post-training quantization (prepare, calibrate,
convert) with each observer (the static recipes; the others compute every scale from the data,
so the observer changes nothing), and for the 4-bit recipes (w4a16, NVFP4, MXFP4) a short QAT
fine-tune of the PTQ model. Accuracies are of the *finalized* model (packed weights, portable
forward) on a fixed test split; the fake-quantized model gives the same bits. Seeds and the
split are fixed, everything runs on the CPU (4 to 14 minutes on two cores, idle to shared; a
line per epoch as it goes). The numbers are in docs/quantization.md, "Quantizing a model".

The stem convolution (one input channel) is kept in float: no block or group of the recipes
fits a dim of 1, and first layers are usually kept in float. w4a16 uses groups of 32 here (its
default, 128, exceeds this model's 32 and 64 input channels).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libreyolo.nn.quantized import RECIPES, calibrate, convert, prepare  # noqa: E402

SEED = 0
SKIP = ["stem"]
OBSERVERS = ("minmax", "moving_average", "percentile")
#: the recipes as the example uses them (w4a16 with groups of 32: see the module docstring)
EXAMPLE_RECIPES = {name: (r.replace(group_size=32) if name == "w4a16" else r)
                   for name, r in RECIPES.items()}
FOUR_BIT = ("w4a16", "nvfp4", "mxfp4")
#: the results' observer key of a recipe that computes every scale from the data
NO_OBSERVER = "n/a"


class DigitsNet(nn.Module):
    """8x8 digits -> 10 classes: four 3x3 convolutions (32-64-64-128 channels, two of stride 2),
    a global average (a mean: its backward is deterministic on CUDA, where adaptive pooling's is
    not) and a linear classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 32, 3, padding=1)
        self.conv1 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(64, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 128, 3, stride=2, padding=1)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        for conv in (self.stem, self.conv1, self.conv2, self.conv3):
            x = F.relu(conv(x))
        return self.fc(x.mean(dim=(2, 3)))


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross entropy from log_softmax and a one-hot product: elementwise ops and a sum, so its
    backward is deterministic on CUDA too (nll_loss's CUDA kernel accumulates atomically)."""
    onehot = F.one_hot(labels, logits.shape[-1]).to(logits.dtype)
    return -(F.log_softmax(logits, dim=-1) * onehot).sum(dim=-1).mean()


def load_split(device="cpu"):
    """(x_train, y_train, x_test, y_test): 1797 digits, a stratified 75/25 split, seed 0;
    pixels scaled to [0, 1], shaped (N, 1, 8, 8)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=0.25, random_state=SEED, stratify=digits.target)

    def tensor(images):
        return torch.tensor(images, dtype=torch.float32, device=device).unsqueeze(1) / 16.0

    return (tensor(x_train), torch.tensor(y_train, device=device), tensor(x_test),
            torch.tensor(y_test, device=device))


def batches(x, y, size, seed):
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    for start in range(0, len(x), size):
        index = order[start:start + size].to(x.device)
        yield x[index], y[index]


def train(model, x, y, *, epochs, lr, seed, label):
    """Adam on batches of 64; one line per epoch (``label``, the mean loss, the seconds so far),
    so a run of minutes is never silent."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    started = time.time()
    for epoch in range(epochs):
        losses = []
        for xb, yb in batches(x, y, 64, seed * 1000 + epoch):
            optimizer.zero_grad(set_to_none=True)
            loss = cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"{label} epoch {epoch + 1}/{epochs}: loss {sum(losses) / len(losses):.4f} "
              f"({time.time() - started:.0f} s)", flush=True)
    return model.eval()


def accuracy(model, x, y) -> float:
    with torch.no_grad():
        return 100.0 * (model.eval()(x).argmax(dim=-1) == y).float().mean().item()


def ptq(float_model, recipe, x_train, observer):
    """prepare, calibrate (8 batches of 64 training images), convert: the finalized model."""
    model = copy.deepcopy(float_model)
    prepare(model, recipe, skip=SKIP)
    calibration = [xb for xb, _ in batches(x_train, x_train, 64, seed=99)][:8]
    calibrate(model, calibration, observer=observer, progress=False)
    return model


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--qat-epochs", type=int, default=6)
    parser.add_argument("--qat-lr", type=float, default=2e-4)
    args = parser.parse_args(argv)
    torch.manual_seed(SEED)
    started = time.time()
    x_train, y_train, x_test, y_test = load_split()
    float_model = train(DigitsNet(), x_train, y_train, epochs=args.epochs, lr=1e-3, seed=SEED,
                        label="float")
    float_acc = accuracy(float_model, x_test, y_test)
    print(f"float: {float_acc:.2f}% on {len(x_test)} test digits "
          f"(trained on {len(x_train)}, {time.time() - started:.0f} s)")
    results = {"float": float_acc, "test_size": len(x_test), "recipes": {}}
    for name, recipe in EXAMPLE_RECIPES.items():
        observers = OBSERVERS if recipe.static else (None,)
        per_observer = {}
        for observer in observers:
            model = ptq(float_model, recipe, x_train, observer or "minmax")
            convert(model)
            per_observer[observer or NO_OBSERVER] = accuracy(model, x_test, y_test)
        best = max(per_observer, key=per_observer.get)
        row = {"ptq": per_observer, "best_observer": best, "ptq_best": per_observer[best],
               "drop": float_acc - per_observer[best]}
        if name in FOUR_BIT:
            model = ptq(float_model, recipe, x_train, best if best != NO_OBSERVER else "minmax")
            torch.manual_seed(SEED)
            train(model, x_train, y_train, epochs=args.qat_epochs, lr=args.qat_lr, seed=SEED + 1,
                  label=f"{recipe.name} QAT")
            convert(model)
            row["qat"] = accuracy(model, x_test, y_test)
            drop, regained = row["drop"], row["qat"] - row["ptq_best"]
            row["recovered"] = None if drop <= 0 else regained / drop
        results["recipes"][name] = row
        print(f"{recipe.name}: PTQ {ptq_cell(row)}" + (f", QAT {row['qat']:.2f}" if "qat" in row
                                                      else ""), flush=True)
    results["seconds"] = time.time() - started
    print()
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


def ptq_cell(row: dict) -> str:
    """A recipe's PTQ accuracies (per cent, 2 decimals) per observer, or the one accuracy of a
    recipe with nothing to calibrate."""
    if row["best_observer"] == NO_OBSERVER:
        return f"{row['ptq_best']:.2f} (nothing to calibrate)"
    return ", ".join(f"{o} {a:.2f}" for o, a in row["ptq"].items())


def table(results: dict) -> str:
    """The markdown table docs/quantization.md shows, from ``main``'s results."""
    lines = [f"float accuracy: {results['float']:.2f}% ({results['test_size']} test digits)", "",
             "| recipe | PTQ accuracy per observer | best | drop | QAT | drop recovered |",
             "|---|---|---|---|---|---|"]
    for name, row in results["recipes"].items():
        best = f"{row['ptq_best']:.2f}"
        if row["best_observer"] != NO_OBSERVER:
            best += f" ({row['best_observer']})"
        qat = f"{row['qat']:.2f}" if "qat" in row else "-"
        if "qat" not in row:
            recovered = "-"
        elif row["drop"] < 1:
            recovered = f"drop under 1 point ({row['drop']:.2f})"
        else:
            recovered = f"{100 * row['recovered']:.0f}%"
        lines.append(f"| {EXAMPLE_RECIPES[name].name} | {ptq_cell(row)} | {best} | "
                     f"{row['drop']:.2f} | {qat} | {recovered} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
