"""Attention kernels: the ``ms_deform_attn`` slot's portable core, caller helpers and providers."""
