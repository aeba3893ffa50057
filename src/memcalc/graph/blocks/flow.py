"""Dataflow annotations for the step timeline: which activations an op reads and writes, so
the timeline can follow each gradient buffer from the op whose backward makes it to the op
whose backward consumes it (``timeline._Walk``).

The building blocks add their ops through ``Scope.add`` (what they save, their FLOPs) and then
say here what each op reads and returns; ops that save nothing but make or pass on a tensor
(dtype casts, the residual adds, a contiguous copy) are added with ``node``. None of this
changes what is saved -- only the timeline reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memcalc.graph.ops import Component, Saved
from memcalc.graph.scope import Scope, dropout


def flow(
    sc: Scope,
    reads: Sequence[Saved],
    writes: Saved | Sequence[Saved] | None,
    *,
    alias_grad: bool = False,
    alias_output: bool = False,
    backward: int = 0,
    forward: int = 0,
) -> None:
    """Annotate the op just added to ``sc``: it reads ``reads`` and returns ``writes``;
    ``backward`` / ``forward``: the scratch bytes of its backward / forward (``Op``)."""
    out = () if writes is None else (writes,) if isinstance(writes, Saved) else tuple(writes)
    sc.ops[-1] = replace(
        sc.ops[-1],
        reads=tuple(reads),
        writes=out,
        alias_grad=alias_grad,
        alias_output=alias_output,
        backward_scratch=backward,
        forward_scratch=forward,
    )


def node(
    sc: Scope,
    name: str,
    comp: Component,
    reads: Sequence[Saved],
    writes: Saved,
    source: str,
    *,
    flops: int = 0,
    core: bool = False,
    alias_grad: bool = False,
    alias_output: bool = False,
    backward: int = 0,
    forward: int = 0,
) -> Saved:
    """An op that saves nothing (a cast, an add, a copy): only its dataflow; returns
    ``writes``."""
    sc.add(name, comp, [], flops, source, core)
    flow(
        sc,
        reads,
        writes,
        alias_grad=alias_grad,
        alias_output=alias_output,
        backward=backward,
        forward=forward,
    )
    return writes


def cast(
    sc: Scope, name: str, comp: Component, x: Saved, dtype: object, *, core: bool = False
) -> Saved:
    """``x.to(dtype)``: a new tensor when the dtype differs (``ToCopyBackward0`` casts the
    gradient back), ``x`` itself otherwise."""
    if x.dtype is dtype:
        return x
    out = Saved(name, x.numel, dtype, needs_grad=x.needs_grad)  # type: ignore[arg-type]
    return node(sc, name, comp, [x], out, "aten._to_copy: saves nothing", core=core)


def dropout_flow(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    p: float,
    *,
    core: bool = False,
) -> Saved:
    """``scope.dropout`` with its dataflow: the backward multiplies the gradient by the mask
    (a new buffer)."""
    before = len(sc.ops)
    out = dropout(sc, name, comp, x, p, core=core)
    if len(sc.ops) > before:
        flow(sc, [x], out)
    return out
