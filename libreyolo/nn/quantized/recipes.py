"""Quantization recipes, as data: what a layer's weight and input become, through which slots,
and which finalized format holds the result.

A recipe names, for the weight and for the input (the activation), the fake-quant slot that
simulates it and the finalized layer's format (``libreyolo.nn.finalized``) that stores it, so
``prepare`` (fake-quantized modules), ``calibrate`` (the static input scales) and ``convert``
(finalized modules) all read the same row. ``docs/quantization.md``, "Quantizing a model", shows
the table ``RECIPES`` holds (``tests/nn/test_quantized_recipes.py`` keeps the two equal).

``block``: the input dim (a Linear's ``in_features``, a convolution's ``in_channels / groups``:
the dim the finalized layers block along) must be a multiple of it. The fake-quant ops and the
finalized layers accept a ragged last block, but the hardware block-scaled GEMMs a deployed
NVFP4 / MX model runs (and the grouped-int4 GEMMs of w4a16) take whole blocks only, so a recipe
refuses a layer that would not deploy instead of simulating a format nothing runs.

Weight scales are always computed from the weight (per output channel, per group or per block),
every step in QAT: only the static activation recipes (``w8a8_int8``, ``fp8_static``) hold
calibrated values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from libreyolo.nn.finalized import WEIGHT_FORMATS
from libreyolo.quant.formats import GROUPED_INT_BITS, MX_BLOCK_SIZE, NVFP4_BLOCK_SIZE
from libreyolo.suggest import did_you_mean

#: The activation formats whose input scale is calibrated (static), and what calibration finds.
STATIC_ACTIVATIONS = {"fp8_static": ("input_scale",),
                      "int8_affine": ("input_scale", "input_zero_point")}

#: Weight format -> the fake-quant slot that simulates it on a weight (see ``Recipe``).
WEIGHT_SLOTS = {
    "fp8": "fake_quant_fp8",
    "int8": "fake_quant_int_grouped",
    "int_grouped": "fake_quant_int_grouped",
    "nvfp4": "fake_quant_nvfp4_weight",
    "mxfp4": "fake_quant_mxfp4_weight",
    "mxfp8": "fake_quant_mxfp8_weight",
}
#: Activation format -> the fake-quant slot that quantizes a layer's input.
ACTIVATION_SLOTS = {
    "fp8_static": "fake_quant_fp8",
    "fp8_dynamic": "fake_quant_fp8",
    "int8_affine": "fake_quant_int8_affine",
    "nvfp4_dynamic": "fake_quant_nvfp4_dynamic",
    "mxfp4_dynamic": "fake_quant_mxfp4_dynamic",
    "mxfp8_dynamic": "fake_quant_mxfp8_dynamic",
}
#: The block the weight format's scales span along the input dim (None: per output channel).
_FORMAT_BLOCKS = {"fp8": None, "int8": None, "nvfp4": NVFP4_BLOCK_SIZE, "mxfp4": MX_BLOCK_SIZE,
                  "mxfp8": MX_BLOCK_SIZE}


@dataclass(frozen=True)
class Recipe:
    """One quantization recipe.

    ``weight`` / ``activation``: the finalized layer's formats (``WEIGHT_FORMATS``,
    ``ACTIVATION_FORMATS``; activation None: weights only); ``bits`` and ``group_size`` for
    ``int_grouped``. ``weight_slot`` / ``activation_slot`` are derived: the fake-quant slots the
    modules call. Weights are fake-quantized as the finalized layer stores them:

    - ``fp8``: E4M3 with one scale per output channel, ``finite amax / 448``: the slot
      ``fake_quant_fp8`` in its dynamic per-row mode on the weight viewed as ``(out, -1)``, whose
      rows are the output channels (the scale computed on the device, no host read);
    - ``int8``: ``[-127, 127]`` with one scale per output channel, ``finite amax / 127``: the
      slot ``fake_quant_int_grouped`` with 8 bits and one group per row of the ``(out, -1)``
      view, which is ``fake_quant_int8_per_channel`` with that scale bit for bit (tested) but
      computes the scale itself: the per-channel op checks a given scale on the host once per
      tensor version (docs/quantization.md, rule 13), and a QAT weight's scale is a new tensor
      every step, so it would synchronize every layer of every step;
    - ``int_grouped``, ``nvfp4``, ``mxfp4``, ``mxfp8``: their weight slot on the finalized
      layers' matrix: a Linear's weight, a convolution's ``(out * kh * kw, in / groups)`` with
      input channels last.
    """

    name: str
    weight: str
    activation: str | None
    bits: int | None = None
    group_size: int | None = None
    doc: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if self.weight not in WEIGHT_FORMATS:
            raise ValueError(f"recipe {self.name!r}: weight must be one of "
                             f"{tuple(WEIGHT_FORMATS)}, got {self.weight!r}")
        allowed = WEIGHT_FORMATS[self.weight].activations
        if self.activation not in allowed:
            raise ValueError(f"recipe {self.name!r}: activation must be one of {allowed} for "
                             f"weight={self.weight!r}, got {self.activation!r}")
        if self.weight == "int_grouped":
            if self.bits not in GROUPED_INT_BITS:
                raise ValueError(f"recipe {self.name!r}: bits must be one of "
                                 f"{GROUPED_INT_BITS}, got {self.bits!r}")
            if isinstance(self.group_size, bool) or not isinstance(self.group_size, int) or \
                    self.group_size <= 0:
                raise ValueError(f"recipe {self.name!r}: group_size must be a positive int, "
                                 f"got {self.group_size!r}")
        elif self.bits is not None or self.group_size is not None:
            raise ValueError(f"recipe {self.name!r}: bits and group_size are for "
                             f"weight='int_grouped' only, got bits={self.bits!r}, "
                             f"group_size={self.group_size!r}")

    @property
    def weight_slot(self) -> str:
        return WEIGHT_SLOTS[self.weight]

    @property
    def activation_slot(self) -> str | None:
        return None if self.activation is None else ACTIVATION_SLOTS[self.activation]

    @property
    def static(self) -> bool:
        """Whether the input scale is calibrated (``calibrate`` must run before ``convert``)."""
        return self.activation in STATIC_ACTIVATIONS

    @property
    def calibrated(self) -> tuple[str, ...]:
        """The buffers calibration fills: ``input_scale`` and, for int8, ``input_zero_point``."""
        return STATIC_ACTIVATIONS.get(self.activation, ())

    @property
    def block(self) -> int | None:
        """The multiple the input dim must be (None: any size); see the module docstring."""
        if self.weight == "int_grouped":
            return self.group_size
        return _FORMAT_BLOCKS[self.weight]

    @property
    def finalized_kwargs(self) -> dict:
        """The format arguments of ``FinalizedLinear`` / ``FinalizedConv2d``."""
        return {"weight": self.weight, "activation": self.activation, "bits": self.bits,
                "group_size": self.group_size}

    def replace(self, **changes) -> Recipe:
        """A copy with ``changes`` (e.g. ``RECIPES["w4a16"].replace(group_size=32)``), checked
        as a new recipe; its name says what changed unless ``name`` is given."""
        if "name" not in changes:
            suffix = ",".join(f"{k}={v}" for k, v in changes.items())
            changes["name"] = f"{self.name}[{suffix}]"
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The recipe as plain data (checkpoints record it this way)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> Recipe:
        return cls(**data)


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("w8a8_int8", "int8", "int8_affine",
           doc="int8 weights per output channel, int8 affine activations (calibrated)"),
    Recipe("fp8_static", "fp8", "fp8_static",
           doc="FP8 E4M3 weights per output channel, E4M3 activations with a calibrated scale"),
    Recipe("fp8_dynamic", "fp8", "fp8_dynamic",
           doc="FP8 E4M3 weights per output channel, E4M3 activations scaled per row"),
    Recipe("w4a16", "int_grouped", None, bits=4, group_size=128,
           doc="int4 weights, one scale per group_size inputs; activations unquantized"),
    Recipe("nvfp4", "nvfp4", "nvfp4_dynamic",
           doc="NVFP4 weights and activations: E2M1, 16-blocks, E4M3 block and fp32 scales"),
    Recipe("mxfp4", "mxfp4", "mxfp4_dynamic",
           doc="MXFP4 weights and activations: E2M1, 32-blocks, E8M0 scales"),
    Recipe("mxfp8", "mxfp8", "mxfp8_dynamic",
           doc="MXFP8 weights and activations: E4M3, 32-blocks, E8M0 scales"),
)}

def get_recipe(recipe: str | Recipe) -> Recipe:
    """A recipe by name (or a ``Recipe`` as it is); a ValueError listing the recipes otherwise."""
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, str) and recipe in RECIPES:
        return RECIPES[recipe]
    if not isinstance(recipe, str):
        raise TypeError(f"recipe must be a recipe name or a Recipe, got "
                        f"{type(recipe).__name__}")
    raise ValueError(f"unknown recipe {recipe!r}{did_you_mean(recipe, RECIPES)}; the recipes are "
                     f"{', '.join(RECIPES)}")
