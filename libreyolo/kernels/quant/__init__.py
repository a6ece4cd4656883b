"""Quantization kernels: ``simulate`` (fake quantization with STE backward, any device).

Importing this package imports nothing heavy: triton loads only when a kernel first runs.
"""
