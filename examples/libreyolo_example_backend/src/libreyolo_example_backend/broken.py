"""`example-broken`, the affine slot with C's rounding, for the conformance suite to reject.

Registered only when this module is named: `pytest conformance/ -p libreyolo_example_backend.broken
--impl example-broken`. Installing the package, its entry point or importing the package never
registers it, so a wrong implementation cannot take a slot in someone else's process.
"""

from libreyolo_example_backend import int8_affine

int8_affine.register_named("example-broken")
