"""Deformable-attention test harness: the shape set's cases with their seeded inputs, and the
bounded parity check with its measured k and floor. Harness code, so it lives beside the suite,
not in the runtime package."""
