"""Regenerate the golden reference outputs: `python -m conformance.golden.regenerate [--force]`.

Reads the cases in cases.toml, builds each seeded adversarial input, runs the reference op with
an upstream gradient, and writes inputs, outputs, STE gradients, masks, packed bytes and their
reference unpack (in the input's dtype) to reference.safetensors (float8 stored natively).
Refuses to overwrite without --force: goldens change only on purpose, and a diff of them is a
change of the numbers' definition.
"""

from __future__ import annotations

import argparse
import math
import tomllib
from pathlib import Path

import torch
from safetensors.torch import save_file

from libreyolo.quant import fake_quant, packing

HERE = Path(__file__).parent
CASES_FILE = HERE / "cases.toml"
GOLDEN_FILE = HERE / "reference.safetensors"
TENSOR_PARAMS = ("scale", "global_amax")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def load_cases(path: Path = CASES_FILE) -> list[dict]:
    return tomllib.loads(path.read_text())["golden"]


def golden_input(case: dict) -> torch.Tensor:
    """The case's seeded input (float32 before the cast), rows as cases.toml describes."""
    gen = torch.Generator().manual_seed(case["seed"])
    rows, cols = _rows_cols(case["shape"])
    unit = case["unit"]
    x = torch.randn(rows, cols, generator=gen) * unit
    x *= torch.exp2(torch.randint(-4, 4, (rows, cols), generator=gen).float())
    x[0] = 0.0
    x[0, 1::2] = -0.0
    x[1, 3], x[1, 20], x[1, 37] = float("nan"), float("inf"), float("-inf")
    ties = torch.tensor(case["ties"]) * unit
    signs = torch.tensor([1.0, -1.0]).repeat(cols)[:cols]
    x[2] = ties.repeat(-(-cols // len(ties)))[:cols] * signs
    tiny = torch.tensor([1e-45, -1e-45, 1e-40, 2.0**-126, 6e-8, -6e-8, 2.0**-20, 0.0])
    x[3] = tiny.repeat(-(-cols // len(tiny)))[:cols]
    x[4:, ::9] *= 1000.0
    return x.reshape(case["shape"]).to(DTYPES[case["dtype"]])


def params_of(case: dict, device: str | torch.device = "cpu") -> dict:
    return {
        name: torch.tensor(value, dtype=torch.float32, device=device)
        if name in TENSOR_PARAMS
        else value
        for name, value in case["params"].items()
    }


def run_case(case: dict, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    """Everything a golden stores about one case, computed by the reference on x's device."""
    params = params_of(case, x.device)
    op = getattr(fake_quant, case["op"])
    leaf = x.detach().clone().requires_grad_()
    out = op(leaf, **params)
    out.backward(g)
    result = {
        "out": out.detach(),
        "grad": leaf.grad,
        "mask": fake_quant.ste_mask(case["op"], x, **params),
    }
    if "pack" in case:
        packed = getattr(packing, case["pack"])(x.nan_to_num(0.0, 0.0, 0.0), **params)
        for field, value in packed._asdict().items():
            if isinstance(value, torch.Tensor):
                result[f"packed.{field}"] = value
        unpack = getattr(packing, f"un{case['pack']}")
        result["unpacked"] = unpack(**packed._asdict(), dtype=x.dtype)
    return result


def build() -> dict[str, torch.Tensor]:
    tensors = {}
    for case in load_cases():
        x = golden_input(case)
        gen = torch.Generator().manual_seed(case["seed"] + 1000)
        g = (torch.randn(x.shape, generator=gen) * 3 + 0.5).to(x.dtype)
        tensors[f"{case['name']}.x"] = x
        tensors[f"{case['name']}.g"] = g
        for key, value in run_case(case, x, g).items():
            tensors[f"{case['name']}.{key}"] = value
    return {key: value.contiguous() for key, value in tensors.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="overwrite the existing goldens")
    parser.add_argument("--output", type=Path, default=GOLDEN_FILE)
    args = parser.parse_args(argv)
    if args.output.exists() and not args.force:
        parser.error(f"{args.output} exists; pass --force to overwrite it")
    save_file(build(), str(args.output), metadata={"torch": torch.__version__})
    print(f"wrote {args.output}")
    return 0


def _rows_cols(shape: list[int]) -> tuple[int, int]:
    return math.prod(shape[:-1]), shape[-1]


if __name__ == "__main__":
    raise SystemExit(main())
