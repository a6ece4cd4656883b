"""An out-of-tree backend: importing it registers its implementations (`-p` loads it in pytest)."""

from libreyolo_example_backend import int8_affine, int8_per_channel

int8_affine.register_all()
int8_per_channel.register_all()
