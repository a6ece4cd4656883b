"""Builders for other projects' kernels that the benchmarks compare against (never committed)."""
