"""Recompute and offload strategies over the op graph."""
