"""The rank's parameters as DeepSpeed meets them, from the op graph: every trainable tensor in
``model.parameters()`` order (the order DeepSpeed flattens and partitions them in), and the
modules that hold them in the order the forward runs them (the order ZeRO-3's parameter
coordinator records its trace in, ``partitioned_param_coordinator.py`` ``record_module``).

A module is an op's weights of one name prefix (``attn.q_proj.weight`` is module
``attn.q_proj`` of its layer); an op that writes the gradient of a weight it does not own (a
tied LM head) uses the embedding's tensor again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from memcalc.graph.ops import Op, OpGraph

PROLOGUE = -1
"""The layer index of the modules before the blocks (embeddings)."""
EPILOGUE = -2
"""The layer index of the modules after the blocks (final norm, LM head)."""


@dataclass(frozen=True)
class Module:
    """One module with parameters, in forward order."""

    layer: int
    """Its decoder layer, or PROLOGUE / EPILOGUE."""
    params: tuple[int, ...]
    """Indices into ``ParamTrace.numels`` of the tensors it uses."""


@dataclass(frozen=True)
class ParamTrace:
    """Every trainable parameter tensor and the modules that use them."""

    numels: tuple[int, ...]
    """Elements of each tensor, in ``model.parameters()`` order."""
    modules: tuple[Module, ...]
    """The modules with parameters, in the forward's order."""
    layers: tuple[int, ...]
    """The layer of each tensor (PROLOGUE / EPILOGUE outside the blocks)."""

    @property
    def total(self) -> int:
        return sum(self.numels)

    @cached_property
    def backward_order(self) -> tuple[int, ...]:
        """Tensor indices in the order the backward writes their gradients: the modules in
        reverse, each tensor at its first use in forward (autograd sums a tied weight's two
        contributions before its AccumulateGrad runs, at the embedding's backward)."""
        first: dict[int, int] = {}
        for j, m in enumerate(self.modules):
            for p in m.params:
                first.setdefault(p, j)
        return tuple(
            p
            for j in range(len(self.modules) - 1, -1, -1)
            for p in reversed(self.modules[j].params)
            if first[p] == j
        )

    @cached_property
    def largest(self) -> int:
        return max(self.numels, default=0)


def _module_key(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _op_modules(
    ops: tuple[Op, ...], layer: int, index: dict[tuple[int, str], int], shared: dict[int, int]
) -> list[Module]:
    """The modules of ``ops`` (one per weight-name prefix, in forward order)."""
    out: list[Module] = []
    for op in ops:
        groups: dict[str, list[int]] = {}
        for w in op.weights:
            if w.trainable:
                groups.setdefault(_module_key(w.name), []).append(index[(layer, w.name)])
        if not op.weights and op.params and op.params in shared:
            groups[op.name] = [shared[op.params]]  # a tied head: the embedding's tensor
        out += [Module(layer, tuple(ps)) for ps in groups.values()]
    return out


def param_trace(graph: OpGraph) -> ParamTrace:
    """The ParamTrace of ``graph`` (every layer listed: O(layers))."""
    numels: list[int] = []
    layers: list[int] = []
    index: dict[tuple[int, str], int] = {}

    def add(layer: int, names_numels: list[tuple[str, int]]) -> None:
        for name, n in names_numels:
            index[(layer, name)] = len(numels)
            numels.append(n)
            layers.append(layer)

    outside = [(w.name, w.numel) for op in graph.prologue for w in op.weights if w.trainable]
    add(PROLOGUE, outside)
    for i in range(graph.num_layers):
        kind = graph.layout.kind_at(i)
        blk = graph.kinds[kind]
        by_name = {w.name: w for op in blk.ops for w in op.weights if w.trainable}
        order = graph.param_order[kind] if graph.param_order else tuple(by_name)
        add(i, [(n, by_name[n].numel) for n in order if n in by_name])
    add(EPILOGUE, [(w.name, w.numel) for op in graph.epilogue for w in op.weights if w.trainable])
    shared = {n: index[(PROLOGUE, name)] for name, n in outside}
    modules = _op_modules(graph.prologue, PROLOGUE, index, shared)
    for i in range(graph.num_layers):
        modules += _op_modules(graph.block(i).ops, i, index, shared)
    modules += _op_modules(graph.epilogue, EPILOGUE, index, shared)
    return ParamTrace(tuple(numels), tuple(modules), tuple(layers))
