"""The step timeline: bytes on the GPU at the moments that can set the peak.

A training step is forward (activations accumulate), the loss (logits, their fp32 copy, the
log-softmax output), backward (the loss gradients first; then, block by block from the last,
saved tensors are freed while parameter gradients appear; a recomputed segment is rebuilt just
before its backward), and the optimizer step (its temporaries). The peak is the largest moment,
and where it happens is reported -- it is not the sum of the four components.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memcalc.graph.layout import LayerLayout
from memcalc.graph.ops import Block, Component, LossPeaks, OpGraph, saved_bytes
from memcalc.params import ParamCounts
from memcalc.spec.training import DType, Loss, TrainingSetup
from memcalc.strategies.recompute import ActivationPlan, Recompute, Segments
from memcalc.strategies.residency import GradientTotals, Residency


@dataclass(frozen=True)
class Moment:
    """Live bytes at one moment of the step, by kind."""

    phase: str
    """forward, backward or optimizer step."""
    where: str
    """The op or block at that moment."""
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    transient_bytes: int
    """Bytes that exist only around this moment."""
    layer: int | None = None
    """The layer whose backward this is (None outside the blocks)."""

    @property
    def total_bytes(self) -> int:
        return (
            self.parameter_bytes
            + self.gradient_bytes
            + self.optimizer_bytes
            + self.activation_bytes
            + self.transient_bytes
        )


@dataclass(frozen=True)
class _Step:
    """One moment of a layer's backward."""

    held: int
    """Bytes of the layer's own saved tensors alive."""
    name: str
    transient: int
    """Activation gradients, the backward's scratch and a recompute's forward tensors."""
    written: int
    """Elements of the parameters whose gradients exist (this layer's)."""
    incoming: int
    """Bytes of the gradient the layer's backward started from, still alive."""
    current: int = 0
    """Elements of the weights whose gradients this op's backward writes (in ``written``)."""


@dataclass(frozen=True)
class _Walk:
    """One block kind's backward, moment by moment from its last op (only the moments no
    later one dominates: a later moment has at least as many gradients written)."""

    steps: tuple[_Step, ...]

    @classmethod
    def of(cls, blk: Block, mode: Recompute, prune: bool = True) -> _Walk:
        steps = _coarse(blk, mode)
        return cls(_undominated(steps) if prune else tuple(steps))


def _undominated(steps: list[_Step]) -> tuple[_Step, ...]:
    """The steps not dominated by a later one (which has written at least as much): a step
    is kept only when its total (with and without the incoming gradient) beats every later
    step's."""
    out: list[_Step] = []
    best = best_out = -1
    for st in reversed(steps):
        total = st.held + st.transient
        if total > best or total - st.incoming > best_out:
            out.append(st)
        best = max(best, total)
        best_out = max(best_out, total - st.incoming)
    return tuple(reversed(out))


def _coarse(blk: Block, mode: Recompute = Recompute.none) -> list[_Step]:
    """A block without dataflow: each op holds its ``grad_bytes`` beside the residual
    stream's gradient, and the saved tensors of the ops before it (a storage is freed with the
    backward of the first op that saved it: ``Node::release_variables`` after it has run).

    Selective recompute (a non-reentrant checkpoint around the attention core,
    ``torch/utils/checkpoint.py``): the core's own saved tensors exist only from the first
    unpack -- the AV matmul's backward -- on (the ops after the core run their backward
    without them); the checkpoint's inputs nothing else saves (k and v before
    ``repeat_kv``) are held by its ``_NoopSaveInputs`` node, the core's first node in forward
    and so its last in backward: alive until the core's backward is done. Its recompute,
    started by the first unpack (the AV matmul's backward), rebuilds ``repeat_kv``'s copy of
    k and, from it, the contiguous k^T copy the q @ k^T matmul saves: both are alive until the
    core's backward is done (without recompute the forward frees the first; measured with the
    CPU tracker on Llama, Mistral, Qwen3: one T x a*d tensor more from the AV matmul's
    backward to the q @ k^T's; not under autocast, where the matmul saves a 16-bit cast).
    """
    held_after: list[int] = []
    seen: set[str] = set()
    total = 0
    for op in blk.ops:
        for saved in op.saves:
            if saved.name not in seen:
                seen.add(saved.name)
                total += saved.nbytes
        held_after.append(total)
    core = [j for j, op in enumerate(blk.ops) if op.attention_core]
    rebuilt = blk.core_only_names if mode is Recompute.selective and core else set()
    inputs = sum(t.nbytes for t in blk.core_inputs if t.name not in seen) if rebuilt else 0
    kept_copy = (
        sum(
            st.nbytes
            for st in blk.ops[core[0]].saves
            if st.name in rebuilt and st.name.endswith("k_repeated")
        )
        if rebuilt
        else 0
    )
    steps = []
    written = 0
    residual = blk.input.nbytes
    for j in range(len(blk.ops) - 1, -1, -1):
        op, held = blk.ops[j], held_after[j]
        if rebuilt and j > core[-1]:
            held += inputs - blk.core_only_bytes  # the core not rebuilt yet
        elif rebuilt and j >= core[0]:
            held += inputs + kept_copy
        written += op.params  # this op's backward writes its weight gradients
        grads = op.grad_bytes - (op.recompute_freed if mode is Recompute.full else 0)
        grads += op.backward_scratch  # transients of its backward (CP's ring buffers)
        steps.append(_Step(held, op.name, grads + residual, written, residual, op.params))
    return steps


_WALKS: dict[tuple[int, Recompute, bool], tuple[Block, _Walk]] = {}


def _walk(blk: Block, mode: Recompute = Recompute.none, prune: bool = True) -> _Walk:
    """The block's walk, computed once per block object and mode (the planner re-estimates
    one lowered graph many times); ``prune=False`` keeps every op's step (for a mechanism
    whose gradient bytes are not monotone in what is written: DeepSpeed's buckets)."""
    key = (id(blk), mode, prune)
    hit = _WALKS.get(key)
    if hit is None or hit[0] is not blk:
        if len(_WALKS) > 4096:
            _WALKS.clear()
        hit = _WALKS[key] = (blk, _Walk.of(blk, mode, prune))
    return hit[1]


@dataclass(frozen=True)
class Pass:
    """The backward of one micro-batch: the loss, then each layer's backward (computed on
    request), then the embedding."""

    label: str
    head: tuple[Moment, ...]
    tail: tuple[Moment, ...]
    block: Callable[[int], Moment]


@dataclass(frozen=True)
class Timeline:
    """The moments of one step. The blocks' backward moments are not listed: ``block(i)``
    computes layer ``i``'s in closed form, and ``peak`` was found among a few candidate layers
    that provably contain the largest (``ActivationPlan.stack.families``). With gradient
    accumulation a second pass stands for every later micro-batch (gradients already there)."""

    passes: tuple[Pass, ...]
    step: Moment
    """The optimizer step."""
    num_layers: int
    peak: Moment

    def block(self, i: int) -> Moment:
        """The worst moment of layer ``i``'s backward (first micro-batch)."""
        return self.passes[0].block(i)

    def moments(self) -> tuple[Moment, ...]:
        """Every moment in step order, one per block (O(layers): for output)."""
        out: list[Moment] = []
        for p in self.passes:
            out += [*p.head, *(p.block(i) for i in range(self.num_layers - 1, -1, -1)), *p.tail]
        return (*out, self.step)

    def summary(self) -> tuple[Moment, ...]:
        """The moments without the middle blocks: the first and last block's backward and the
        peak are kept."""
        n = self.num_layers
        out: list[Moment] = []
        for p in self.passes:
            layers = {n - 1, 0} if n else set()
            if self.peak.layer is not None and self.peak.where.startswith(p.label):
                layers.add(self.peak.layer)
            out += [*p.head, *(p.block(i) for i in sorted(layers, reverse=True)), *p.tail]
        return (*out, self.step)


@dataclass(frozen=True)
class RankState:
    """The bytes a rank's placement leaves on the GPU (``strategies/placement.py``)."""

    params_bytes: int
    optimizer_bytes: int
    stored_activation_bytes: int
    """One micro-batch's stored activations on the GPU."""
    step_temporary_bytes: int
    activations_offloaded: bool = False
    grads_cap: int | None = None
    """Gradient bytes the GPU holds at most (params=cpu), or None: every gradient stays."""


def step_timeline(
    graph: OpGraph,
    plan: ActivationPlan,
    setup: TrainingSetup,
    counts: ParamCounts,
    state: RankState,
    rank: Residency,
    *,
    others_first: int = 0,
    others_later: int | None = None,
    first_layer: int = 0,
) -> Timeline:
    """Moments of one step (after ``zero_grad(set_to_none=True)``: no gradients at the start).

    Loss: HF ``ForCausalLMLoss`` -- in forward, ``log_softmax`` writes its fp32 output while the
    logits (and their fp32 copy under 16-bit) are alive; in backward, ``nll_loss_backward``
    writes a b*s*V fp32 gradient and ``_log_softmax_backward_data`` another before the saved
    output is freed (measured: the peak op of every reference case at small width).
    Tied embeddings: autograd sums the LM-head and embedding gradients of the shared weight
    in an input buffer (three V x h tensors alive at the ``add``).
    Block backward: the block's own saved tensors are all alive when its backward starts
    (kept from forward, or rebuilt by recompute) and are freed as their ops' backward runs;
    each op's backward holds its output gradient and its input gradients (``Op.grad_bytes``),
    and the residual stream's gradient (T*h) is alive throughout.
    Micro-batches: ``others_first`` bytes of other micro-batches' activations are held during
    the first micro-batch's backward (pipeline 1F1B); with gradient accumulation, a later
    micro-batch's backward (``others_later`` held) runs with every gradient already written.
    ``first_layer`` numbers the layers of a pipeline stage as the whole model does.
    What each parallel mechanism holds -- gradients as they are written, gathered weights,
    buffers, the pipeline's kept outputs, tensor parallelism's extras -- ``rank`` says
    (``strategies/residency/``); this walk only asks it at each moment.
    """
    walk = _StepWalk(graph, plan, setup, counts, state, rank, first_layer)
    passes = [walk.make_pass("", others_first, False, rank.pipeline.first)]
    if others_later is not None:
        passes.append(walk.make_pass("micro-batch 2+: ", others_later, True, rank.pipeline.later))
    step = Moment(
        "optimizer step",
        "step()",
        walk.P,
        rank.gradients.at_step(),
        state.optimizer_bytes,
        0,
        state.step_temporary_bytes,
    )
    peak: Moment | None = None
    for pss, candidates in passes:
        for m in (
            *pss.head,
            *(pss.block(i) for i in sorted(candidates, reverse=True)),
            *pss.tail,
        ):
            if peak is None or m.total_bytes > peak.total_bytes:
                peak = m
    if peak is None or step.total_bytes > peak.total_bytes:
        peak = step
    return Timeline(tuple(pss for pss, _ in passes), step, graph.num_layers, peak)


class _StepWalk:
    """The moments of one micro-batch's pass, asked of the rank's mechanisms."""

    def __init__(
        self,
        graph: OpGraph,
        plan: ActivationPlan,
        setup: TrainingSetup,
        counts: ParamCounts,
        state: RankState,
        rank: Residency,
        first_layer: int,
    ) -> None:
        self.graph, self.plan, self.state, self.rank = graph, plan, state, rank
        self.counts, self.first_layer = counts, first_layer
        self.T = setup.tokens
        self.V = graph.logits.numel // self.T if graph.logits else 0
        self.p = setup.activation_dtype
        self.g = setup.gradient_dtype.itemsize
        self.P = state.params_bytes + rank.buffer_bytes
        self.n = graph.num_layers
        self.has_loss = setup.loss is Loss.standard and graph.logits is not None
        self.fused_loss = setup.loss is Loss.fused
        # torch.autocast caches the 16-bit weight casts until the autocast region ends (after
        # the loss): for recomputed blocks nothing else holds them, so they peak with the loss
        self.weight_cache = sum(
            c * blk.weight_cast_bytes
            for blk, c in zip(graph.kinds, plan.fully_recomputed, strict=False)
        )
        self.block_grads = tuple(b.grad_bytes(self.g) for b in graph.kinds)
        self.has_forward_scratch = any(op.forward_scratch for b in graph.kinds for op in b.ops)
        embedding_trains = any(w.trainable for op in graph.prologue for w in op.weights)
        self.tied = counts.head == 0 and embedding_trains
        # under gradient accumulation a tied head's gradient sits in the embedding's autograd
        # input buffer beside the full gradients, from the head's backward to the embedding's
        self.tied_buffer = counts.lm_head_numel * self.g if self.tied else 0

    def walk_at(self, i: int, in_place: bool = False) -> _Walk:
        # a later micro-batch's moments hold the op's new weight gradients (``current``),
        # which are not monotone along the walk: every step is kept
        prune = self.rank.gradients.prunes and not in_place
        return _walk(self.graph.block(i), layer_mode(self.plan, i), prune)

    def loss_moments(self, label: str, acts: int, accumulated: bool, kept: int) -> list[Moment]:
        """The loss's forward (log_softmax) and backward moments."""
        if not self.has_loss:
            return []
        T, V, rank, OPT = self.T, self.V, self.rank, self.state.optimizer_bytes
        peaks = self.graph.loss_peaks
        if peaks is None:  # HF ForCausalLMLoss (the docstring of step_timeline)
            peaks = LossPeaks(
                self.graph.logits.nbytes  # type: ignore[union-attr]
                + (T * V * 4 if self.p is not DType.fp32 else 0),
                2 * T * V * 4,
            )
        logits, loss_grads = peaks.forward_bytes, peaks.backward_bytes
        logits += self.weight_cache
        extra = rank.tensor_parallel.loss_bytes
        grads = rank.gradients.at_loss(accumulated)
        return [
            Moment(
                "forward",
                f"{label}{peaks.forward_where}",
                self.P + rank.params.at_loss_forward(),
                grads,
                OPT,
                acts,
                logits + extra,
            ),
            Moment(
                "backward",
                f"{label}{peaks.backward_where}",
                self.P + rank.params.at_loss_backward(),
                grads,
                OPT,
                acts,
                loss_grads + extra + kept,
            ),
        ]

    def forward_moments(self, label: str, others: int, accumulated: bool) -> list[Moment]:
        """Moments of the forward, when the rank's parameter mechanism gathers weights there
        beyond what its backward holds (DeepSpeed ZeRO-3's prefetch): the embedding's, then
        each layer's with the activations of the layers before it and its own -- of those the
        first, the last and the largest are kept."""
        params = self.rank.params
        first = params.at_forward(None)
        if first is None:
            return []
        grads, opt = self.rank.gradients.at_loss(accumulated), self.state.optimizer_bytes
        below = self.graph.prologue_saved_bytes + others
        layers = []
        for i in range(self.n):
            acts = below + self.plan.held_below(i) + self.plan.layer_stored(i)
            gathered = params.at_forward(i) or 0
            where = f"{label}block {self.first_layer + i}"
            layers.append(Moment("forward", where, self.P + gathered, grads, opt, acts, 0, layer=i))
        kept = (
            {0, self.n - 1, max(range(self.n), key=lambda i: layers[i].total_bytes)}
            if self.n
            else set()
        )
        first_moment = Moment("forward", f"{label}embedding", self.P + first, grads, opt, others, 0)
        return [first_moment, *(layers[i] for i in sorted(kept) if 0 <= i < self.n)]

    def scratch_moments(self, label: str, others: int, accumulated: bool) -> list[Moment]:
        """The forward moment of an op with forward scratch (context parallelism's ring
        attention), at the highest layer of each block kind that has one: the activations
        below it, its layer's saved tensors up to that op (or, recomputed, what its
        checkpoint keeps) and the scratch."""
        top: dict[int, int] = {}
        for i in range(self.n):
            top[id(self.graph.block(i))] = i
        grads, opt = self.rank.gradients.at_loss(accumulated), self.state.optimizer_bytes
        below = self.graph.prologue_saved_bytes + others
        out = []
        for i in sorted(top.values()):
            blk = self.graph.block(i)
            j, scratch = max(enumerate(op.forward_scratch for op in blk.ops), key=lambda x: x[1])
            if scratch == 0:
                continue
            own = (
                saved_bytes(blk.ops[: j + 1])
                if layer_mode(self.plan, i) is Recompute.none
                else self.plan.layer_stored(i)
            )
            acts = below + self.plan.held_below(i) + own
            gathered = self.rank.params.at_forward(i) or 0
            where = f"{label}block {self.first_layer + i}: {blk.ops[j].name} (ring)"
            out.append(Moment("forward", where, self.P + gathered, grads, opt, acts, scratch, i))
        return out

    def head_moments(self, label: str, others: int, accumulated: bool, kept: int) -> list[Moment]:
        """Moments of the LM head's backward a mechanism says more about (DeepSpeed's gradient
        hooks), with every block's activations still held."""
        norms = saved_bytes([op for op in self.graph.epilogue if op.component is Component.norm])
        acts = self.graph.prologue_saved_bytes + self.plan.held_below(self.n) + norms + others
        gathered = self.rank.params.at_loss_backward()
        return [
            Moment(
                "backward",
                f"{label}{t.where}",
                self.P + (gathered if t.gathered_bytes is None else t.gathered_bytes),
                t.gradient_bytes,
                self.state.optimizer_bytes,
                acts,
                t.transient_bytes + kept,
            )
            for t in self.rank.gradients.after_loss(accumulated)
        ]

    def tail_moments(
        self, label: str, others: int, accumulated: bool, kept: int
    ) -> tuple[Moment, ...]:
        """Moments after the last gradient (a mechanism's epilogue: DeepSpeed's reduction of
        its last bucket)."""
        return tuple(
            Moment(
                "backward",
                f"{label}{t.where}",
                self.P + self.rank.params.at_embedding(),
                t.gradient_bytes,
                self.state.optimizer_bytes,
                others,
                t.transient_bytes + kept,
            )
            for t in self.rank.gradients.tail(accumulated)
        )

    def block_moment(self, label: str, i: int, others: int, accumulated: bool, kept: int) -> Moment:
        """Layer ``i``'s worst backward moment."""
        graph, plan, rank = self.graph, self.plan, self.rank
        # the gradient entering the stage's last layer is its receive buffer (counted)
        received = rank.pipeline.grad_received and i == self.n - 1
        best = (0, "", 0, 0)
        in_place = accumulated and rank.gradients.accumulates_in_place
        buffer = self.tied_buffer if in_place else 0
        for st in self.walk_at(i, in_place).steps:
            gr = rank.gradients.at_block(i, st.written * self.g, accumulated, st.current * self.g)
            transient = st.transient - (st.incoming if received else 0) + buffer
            if in_place:  # the op's new weight gradients, added to .grad and dropped
                transient += st.current * self.g
            if st.held + transient + gr > best[0] + best[2] + best[3]:
                best = (st.held, st.name, transient, gr)
        held, name, transient, on_gpu = best
        if self.state.activations_offloaded:
            below = graph.prologue_saved_bytes + (
                graph.epilogue_saved_bytes if i == self.n - 1 else 0
            )
        else:
            below = graph.prologue_saved_bytes + plan.held_below(i)
        return Moment(
            "backward",
            f"{label}block {self.first_layer + i}: {name}",
            self.P + rank.params.at_block(i),
            on_gpu,
            self.state.optimizer_bytes,
            below
            + others
            + checkpoint_held(graph, plan, i)
            - span_inputs_freed(graph, plan, i)
            + held,
            transient + kept,
            layer=i,
        )

    def embedding_moments(
        self, label: str, others: int, accumulated: bool, kept: int
    ) -> tuple[Moment, ...]:
        """The embedding's backward (with a tied weight, the add of the head's gradient)."""
        graph, rank, counts = self.graph, self.rank, self.counts
        if not any(op.component is Component.embedding for op in graph.prologue):
            return ()
        tied_transient = 2 * counts.lm_head_numel * self.g if self.tied else 0
        if accumulated and rank.gradients.accumulates_in_place:
            # AccumulateGrad adds the new gradient in place and drops it: the tied weight's
            # sum, or the embedding's own weight gradient, is a temporary beside them
            # (op by op: GPT-2's position embedding's comes after the tied weight's sum)
            tied_transient += max(
                (
                    sum(w.grad_bytes(self.g) for w in op.weights if w.trainable)
                    for op in graph.prologue
                ),
                default=0,
            )
        return (
            Moment(
                "backward",
                f"{label}embedding" + (" (tied weight add)" if self.tied else ""),
                self.P + rank.params.at_embedding(),
                rank.gradients.at_embedding(accumulated),
                self.state.optimizer_bytes,
                graph.prologue_saved_bytes + others,
                tied_transient + kept,
            ),
        )

    def accumulated_head_moments(self, label: str, others: int, kept: int) -> list[Moment]:
        """A later micro-batch's backward through the ops after the blocks (the LM head,
        the final norm), from the last: each op's new weight gradients -- a temporary that
        AccumulateGrad adds in place (``torch/csrc/autograd/functions/accumulate_grad.h``
        ``accumulateGrad``: ``variable_grad += new_grad``) -- beside every gradient already
        there, its activation gradients, and at the head the logits' gradient the loss's
        backward made (a b*s*V tensor; the loss's saved tensors are gone). Without
        accumulation these moments are below the loss's or the last block's (the head's
        weight gradient is counted with the last block's); with it, the head's V x h
        temporary can set the peak (tiny-llama b1 s16 fp32: +36,736 bytes, measured)."""
        graph = self.graph
        ops = [op for op in graph.epilogue if not op.name.startswith("loss.")]
        if not ops:
            return []
        loss_saved = saved_bytes([op for op in graph.epilogue if op.name.startswith("loss.")])
        logits = graph.logits.nbytes if graph.logits is not None else 0
        logits_grad = 0
        if self.has_loss:
            logits_grad = self.T * self.V * 4 if self.p is DType.fp32 else logits
        head = max((j for j, op in enumerate(ops) if not op.name.startswith("logits.")), default=-1)
        grads = self.rank.gradients.at_loss(True)
        acts = self.state.stored_activation_bytes + others - loss_saved
        # a storage goes with the backward of the first op that saved it (release_variables)
        seen: set[str] = set()
        first_saved = []
        for op in ops:
            first_saved.append(sum(s.nbytes for s in op.saves if s.name not in seen))
            seen.update(s.name for s in op.saves)
        out = []
        for j in range(len(ops) - 1, -1, -1):
            op = ops[j]
            temp = sum(w.grad_bytes(self.g) for w in op.weights if w.trainable)
            act_grads = op.grad_bytes
            alive = 0
            if j == head:
                alive = logits_grad
                if self.has_loss or self.fused_loss:
                    act_grads = max(0, act_grads - logits)
            out.append(
                Moment(
                    "backward",
                    f"{label}{op.name}",
                    self.P + self.rank.params.at_loss_backward(),
                    grads,
                    self.state.optimizer_bytes,
                    acts,
                    temp + alive + act_grads + (self.tied_buffer if j <= head else 0) + kept,
                )
            )
            acts -= first_saved[j]
        return out

    def make_pass(
        self, label: str, others: int, accumulated: bool, pipeline: tuple[int, int]
    ) -> tuple[Pass, set[int]]:
        kept, aliased = pipeline
        others -= aliased  # saved inputs that are receive buffers: counted with the buffers
        head = self.forward_moments(label, others, accumulated)
        if self.has_forward_scratch:
            head += self.scratch_moments(label, others, accumulated)
        head += self.loss_moments(
            label, self.state.stored_activation_bytes + others, accumulated, kept
        )
        head += self.head_moments(label, others, accumulated, kept)
        if accumulated and self.rank.gradients.accumulates_in_place:
            head += self.accumulated_head_moments(label, others, kept)
        tail = self.embedding_moments(label, others, accumulated, kept)
        tail += self.tail_moments(label, others, accumulated, kept)

        def block(i: int) -> Moment:
            return self.block_moment(label, i, others, accumulated, kept)

        return Pass(label, tuple(head), tail, block), self.candidates(accumulated)

    def candidates(self, accumulated: bool) -> set[int]:
        """Layers among which the largest block moment is."""
        cap = self.state.grads_cap
        totals = self.rank.gradients.totals

        def before(i: int) -> int:
            return totals.full if accumulated else totals.before(i)

        out = _candidate_layers(
            self.plan, self.graph.layout, self.walk_at, self.block_grads, self.g, before, cap
        )
        out |= self.rank.gradients.extra_candidates()
        # a span input is held from its first layer up: the moments are affine on each side
        for start in _span_starts(self.graph, self.plan):
            for fam in self.plan.stack.progressions(affine=cap is None):
                t = -(-(start - fam.first) // fam.step)  # the first member at or above it
                out |= {fam.at(u) for u in (t - 1, t) if 0 <= u < fam.count}
        return out


def _head_grads(graph: OpGraph, counts: ParamCounts, g: int) -> int:
    """Gradient bytes the backward writes before the first block's: the LM head's weight
    gradient (for a tied head, held in the embedding's autograd input buffer until the
    embedding's own gradient arrives) and the final norm's."""
    embedding_trains = any(w.trainable for op in graph.prologue for w in op.weights)
    tied = counts.head == 0 and embedding_trains
    return sum(w.grad_bytes(g) for op in graph.epilogue for w in op.weights) + (
        counts.lm_head_numel * g if tied else 0
    )


def gradient_totals(
    graph: OpGraph, counts: ParamCounts, g: int, extra_grad_bytes: int = 0
) -> GradientTotals:
    """The full gradients of ``graph``'s rank: every one (``extra_grad_bytes`` beyond the
    parameters': DTensor's replicated embedding gradient), the head's, per block kind."""
    return GradientTotals(
        counts.grad_bytes(g) + extra_grad_bytes,
        _head_grads(graph, counts, g),
        tuple(b.grad_bytes(g) for b in graph.kinds),
        graph.layout,
    )


def _candidate_layers(
    plan: ActivationPlan,
    layout: LayerLayout,
    walk_at: Callable[[int], _Walk],
    block_grads: tuple[int, ...],
    g: int,
    before: Callable[[int], int],
    cap: int | None,
) -> set[int]:
    """Layers among which the largest block moment is. Along a ``Progression`` the bytes
    held below a layer and the gradients written before it change by the same amount at each
    step, so the moment is affine in the step -- largest at an end -- except (a) at a piece's
    first layer, whose predecessor (prefetched under FSDP) belongs to another piece: the
    second member is kept too; and (b) when gradients on the GPU are capped at ``cap``
    (params=cpu: min(written, cap) is concave): each op's moment is then largest at an end or
    where its gradients reach the cap, which is solved for directly."""
    out: set[int] = set()
    for fam in plan.stack.progressions(affine=cap is None):
        ends = {0, min(1, fam.count - 1), fam.count - 1}
        if cap is not None and fam.count > 2:
            step = before(fam.at(0)) - before(fam.at(1))
            if step > 0:
                kind = layout.kind_at(fam.first)
                start = before(fam.first)
                for st in walk_at(fam.first).steps:
                    w = min(st.written * g, block_grads[kind])
                    t = -(-(start + w - cap) // step)  # first member at or below the cap
                    ends |= {t - 1, t}
        out |= {fam.at(t) for t in ends if 0 <= t < fam.count}
    return out


def layer_mode(plan: ActivationPlan, i: int) -> Recompute:
    """What layer ``i``'s backward rebuilds: none (it starts from kept tensors -- no
    recompute, or a layer of an every-k segment below its last, whose tensors the segment's
    recompute has rebuilt already), the attention core (selective), or the whole layer at the
    first unpack (full: the last layer of a checkpointed segment, ``torch/utils/checkpoint.py``
    non-reentrant ``_checkpoint_hook.unpack_hook``)."""
    stack = plan.stack
    if isinstance(stack, Segments):
        last = min(i - i % stack.k + stack.k, stack.layout.n) - 1
        return Recompute.full if i == last else Recompute.none
    return stack.choice[stack.layout.kind_at(i)]


def checkpoint_held(graph: OpGraph, plan: ActivationPlan, i: int) -> int:
    """Bytes a checkpoint keeps during layer ``i``'s backward that ``held_below`` does not
    count: its segment's input, when the segment's first layer saves no view of it (its
    ``_NoopSaveInputs`` node runs after the whole segment); and for layer 0 the inputs every
    checkpoint keeps once (HF's mask, position ids), freed with the last checkpoint."""
    stack = plan.stack
    out = stack.extra if i == 0 else 0
    if isinstance(stack, Segments):
        start = i - i % stack.k
    elif stack.choice[stack.layout.kind_at(i)] is Recompute.full:
        start = i
    else:
        return out
    blk = graph.block(start)
    if blk.input.name not in {st.name for op in blk.ops for st in op.saves}:
        out += blk.input.nbytes
    # the forward's ctx attributes (bitsandbytes' int8 inputs) beside the replay's own copies
    return out + graph.block(i).checkpoint_bytes - graph.block(i).input.nbytes


def _span_starts(graph: OpGraph, plan: ActivationPlan) -> set[int]:
    """The lowest layer whose backward holds each of ``graph.span_inputs``."""
    out = set()
    for span in graph.span_inputs:
        first = min(graph.layout.index_of_occurrence(k, 0) for k in span.kinds)
        stack = plan.stack
        out.add(first - first % stack.k if isinstance(stack, Segments) else first)
    return out


def span_inputs_freed(graph: OpGraph, plan: ActivationPlan, i: int) -> int:
    """Bytes of ``graph.span_inputs`` gone by layer ``i``'s backward: those whose layers all
    come after what still holds them. A checkpointed segment's closure keeps every keyword
    its layers were called with (``torch/utils/checkpoint.py``: the recompute replays the
    segment's function) until its last node is freed, so the segment's later layers count as
    not through (measured on Gemma 3, full recompute: block 0's backward runs without the
    full-attention mask and rotary tables, whose layers 1 and 3 are done)."""
    if not graph.span_inputs:
        return 0
    stack = plan.stack
    reach = min(i - i % stack.k + stack.k, stack.layout.n) - 1 if isinstance(stack, Segments) else i
    layout = graph.layout
    out = 0
    for span in graph.span_inputs:
        if span.checkpointed and not stack.extra:
            continue  # not counted: no checkpoint keeps it
        first = min(layout.index_of_occurrence(k, 0) for k in span.kinds)
        if reach < first < layout.n:
            out += span.nbytes
    return out
