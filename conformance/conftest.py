"""Loads the suite's plugin (conformance/plugin.py) for tests under conformance/.

A star import rather than `pytest_plugins`, which pytest refuses outside the top-level conftest:
this way the suite runs both as `pytest conformance/` and as part of a whole-repository run.
"""

from conformance.plugin import *  # noqa: F403
