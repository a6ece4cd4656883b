"""QAT and simulated post-training quantization: the users of the fake-quant slots.

Three calls quantize a model with one recipe (docs/quantization.md, "Quantizing a model"):

```python
from libreyolo.nn.quantized import calibrate, convert, prepare

report = prepare(model, "fp8_static", skip=["stem.conv"])  # fake-quantized layers, in place
calibrate(model, batches)                                   # static input scales
convert(model)                                              # finalized, packed layers
```

Between ``prepare`` and ``convert`` the model trains as it is (QAT: the fake-quant slots'
straight-through gradients). ``save`` / ``load`` write and read a model at any of the three
stages (``checkpoint.py``).
"""

from .checkpoint import describe, load, restore, save
from .modules import QuantConv2d, QuantLinear, compute_dtype
from .observers import (
    OBSERVERS,
    MinMaxObserver,
    MovingAverageObserver,
    Observer,
    PercentileObserver,
    input_qparams,
)
from .prepare import (
    CalibrationReport,
    ConvertReport,
    Entry,
    LayerError,
    PrepareReport,
    calibrate,
    convert,
    prepare,
    quantized_layers,
)
from .recipes import RECIPES, Recipe, get_recipe

__all__ = [
    "OBSERVERS",
    "RECIPES",
    "CalibrationReport",
    "ConvertReport",
    "Entry",
    "LayerError",
    "MinMaxObserver",
    "MovingAverageObserver",
    "Observer",
    "PercentileObserver",
    "PrepareReport",
    "QuantConv2d",
    "QuantLinear",
    "Recipe",
    "calibrate",
    "compute_dtype",
    "convert",
    "describe",
    "get_recipe",
    "input_qparams",
    "load",
    "prepare",
    "quantized_layers",
    "restore",
    "save",
]
