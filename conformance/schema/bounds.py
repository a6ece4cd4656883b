"""The bounded contract's one formula, shared by the suite's cells and the slot harnesses."""


def bounded_limit(portable_error: float, oracle_max: float, eps: float, k: float,
                  floor_ulps: float) -> float:
    """The bounded contract's limit: k x the portable path's error + floor_ulps x eps x max|oracle|.
    The one formula every bounded check uses (the suite's cells and the MSDA harness)."""
    return k * portable_error + floor_ulps * eps * oracle_max
