"""LibreYOLO kernels: reference numerics, accelerated variants, and the registry between them."""

__version__ = "0.1.0"
