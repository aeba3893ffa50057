"""``memcalc plan``: the fewest GPUs of each kind that fit, the fastest configuration within a
GPU budget, and the largest micro-batch or sequence that fits -- searched over parallel
layouts, ZeRO stages, recompute and offload (``space.py``, ``search.py``), decided by proven
bounds (``bounds.py``) and full estimates."""

from memcalc.plan.maximize import Maximize, Maximized, maximize
from memcalc.plan.search import KindResult, PlanRequest, PlanResult, Row, plan
from memcalc.plan.strategies import added_seconds, candidate_options, cheapest_fit

__all__ = [
    "KindResult",
    "Maximize",
    "Maximized",
    "PlanRequest",
    "PlanResult",
    "Row",
    "added_seconds",
    "candidate_options",
    "cheapest_fit",
    "maximize",
    "plan",
]
