"""memcalc: how much GPU memory a training job needs, and what makes it fit.

From Python (docs/api.md)::

    import memcalc
    b = memcalc.estimate("llama-3-8b", gpu="h100", seq=8192, recompute="full")
    p = memcalc.plan("llama-3-70b", gpu="h100", seq=8192, global_batch=512)

``import memcalc`` loads nothing else: ``memcalc.estimate`` and ``memcalc.plan`` are loaded
when first used. They are the submodules of those names (``from memcalc.estimate import
Options`` keeps working), which are also callable: calling one runs ``memcalc.api.estimate``
or ``memcalc.api.plan``. The estimate path (``memcalc.spec``, ``memcalc.graph``,
``memcalc.strategies``, ``memcalc.estimate``, ``memcalc.report``) never imports torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the names are to a type checker: the API's functions
    from memcalc.api import Estimate as Estimate
    from memcalc.api import Plan as Plan
    from memcalc.api import estimate as estimate
    from memcalc.api import plan as plan
    from memcalc.errors import MemcalcError as MemcalcError

LAZY = {
    "Estimate": "memcalc.api",
    "Plan": "memcalc.api",
    "MemcalcError": "memcalc.errors",
    "api": "memcalc.api",
}
"""Names ``memcalc`` exports, and the module each is loaded from when first used."""


class _CallableModule(types.ModuleType):
    """``memcalc.estimate`` and ``memcalc.plan``: a submodule that is also the API function
    of its name (``memcalc.estimate("gpt2")`` calls ``memcalc.api.estimate("gpt2")``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from memcalc import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


def _callable(name: str) -> types.ModuleType:
    module = importlib.import_module(f"{__name__}.{name}")
    if type(module) is types.ModuleType:
        module.__class__ = _CallableModule
    return module


class _Package(types.ModuleType):
    """``memcalc`` itself: ``estimate`` and ``plan`` always give the callable submodules
    (where the import system binds the plain submodule, it is already in sys.modules)."""

    @property
    def estimate(self) -> types.ModuleType:
        return _callable("estimate")

    @estimate.setter
    def estimate(self, module: types.ModuleType) -> None:
        pass

    @property
    def plan(self) -> types.ModuleType:
        return _callable("plan")

    @plan.setter
    def plan(self, module: types.ModuleType) -> None:
        pass


def __getattr__(name: str) -> Any:
    if name in LAZY:
        module = importlib.import_module(LAZY[name])
        return module if name == "api" else getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _Package
