"""Triton fake-quantization kernels, bit-exact against ``libreyolo.quant.fake_quant``.

One kernel serves every fake-quant slot (``kernels.py``); ``plan.py`` turns a slot's arguments
into that kernel's configuration, ``launch.py`` runs it (forward and straight-through backward)
and ``triton_provider.py`` registers one ``triton`` implementation per slot. Only the provider is
imported by the registry, and it imports triton lazily, on the first launch.
"""
