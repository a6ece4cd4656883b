"""A pytest plugin (``-p recursing_backend``, this folder on PYTHONPATH) that registers the
dispatch-recursion control as a third party would, under its own name, so a test can validate it
with ``--impl recursing`` in a child process."""

from conformance.negative.disabled import SLOT, recurses_into_dispatch
from libreyolo.kernels import register

register(SLOT, recurses_into_dispatch, name="recursing")
