"""Quantization kernels for finalized models (no backward): the packed-weight unpack.

``unpack_plan.py`` turns an unpack slot's arguments into the kernel's configuration,
``unpack_launch.py`` runs ``unpack_kernels.py``, and ``unpack_provider.py`` registers one
``triton`` implementation per unpack slot. Only the provider is imported by the registry, and it
imports triton lazily, on the first launch.
"""
