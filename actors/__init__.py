"""Thin Dramatiq layer: the broker moves wake hints and the periodic drain, nothing else."""
