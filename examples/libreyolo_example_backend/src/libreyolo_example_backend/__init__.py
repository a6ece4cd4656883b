"""An out-of-tree backend: importing it registers its implementations (`-p` loads it in pytest)."""

from libreyolo_example_backend.int8_affine import register_all

register_all()
