"""Accelerated quantization code (Triton kernels and their providers), judged against the
references of the other ``quant`` folder, ``libreyolo.quant``, which defines the numbers and holds
no kernel (docs/architecture.md, "Names that look alike").

``simulate``: fake quantization with its straight-through backward, for training and calibration.
``execute``: finalized models, no backward: packed-weight unpack and the FP8 linear's prologue,
GEMM and epilogue.

Importing this package imports nothing heavy: triton loads only when a kernel first runs.
"""
