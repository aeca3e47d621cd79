"""Capacity plans from measured bench curves: agents per GPU at a service target, GPUs, racks, power."""
