"""The sweeps: scripts that run one choice (a tile, a block size, a control's margin) over its
range, so a shipped constant is a measured one."""
