"""A pytest plugin (``-p breakers_backend``, this folder on PYTHONPATH) that registers the
implementations of ``breakers`` as a third party would, so a test can validate one with
``--impl NAME`` in a child process."""

from breakers import register_all

register_all()
