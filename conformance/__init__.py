"""The parity and conformance suite: `pytest conformance/` (see docs/conformance.md)."""
