"""An out-of-tree backend: importing it (its entry point, or `-p` in pytest) registers its correct
implementations. The deliberately wrong one is opted into by name: `broken`."""

from libreyolo_example_backend import int8_affine, int8_per_channel

int8_affine.register_named("example-correct")
int8_per_channel.register_all()
