"""The op graph: what each op of a training step saves for backward, and what it costs."""

from memcalc.graph.ops import Block, Component, Op, OpGraph, Saved

__all__ = ["Block", "Component", "Op", "OpGraph", "Saved"]
