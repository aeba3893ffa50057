"""Mixture-of-experts MLP: router, routed experts as HF runs them, shared experts."""

from __future__ import annotations

from memcalc.errors import MemcalcError
from memcalc.graph.ops import Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.families.base import Implementation
from memcalc.spec.model import ModelSpec


def moe_mlp(sc: Scope, spec: ModelSpec, impl: Implementation, dims: Dims, x: Saved) -> Saved:
    """The MoE MLP of one layer on its (normed) input ``x``."""
    raise MemcalcError(f"{spec.name}: mixture-of-experts layers are not lowered yet")
