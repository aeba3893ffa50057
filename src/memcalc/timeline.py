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

from memcalc.graph.layout import Layout
from memcalc.graph.ops import Block, OpGraph
from memcalc.params import ParamCounts
from memcalc.spec.training import DType, Loss, TrainingSetup
from memcalc.strategies.recompute import ActivationPlan
from memcalc.strategies.sharding import NO_SHARDING, Sharding


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
class _Walk:
    """One block kind's backward, op by op from its last op: at each op, the saved bytes still
    held, the op, its activation-gradient bytes and the parameter elements written so far."""

    steps: tuple[tuple[int, str, int, int], ...]

    @classmethod
    def of(cls, blk: Block) -> _Walk:
        held_after: list[int] = []
        seen: set[str] = set()
        total = 0
        for op in blk.ops:
            for saved in op.saves:
                if saved.name not in seen:
                    seen.add(saved.name)
                    total += saved.nbytes
            held_after.append(total)
        steps = []
        written = 0
        for op, held in zip(reversed(blk.ops), reversed(held_after), strict=True):
            written += op.params  # this op's backward writes its weight gradients
            steps.append((held, op.name, op.grad_bytes, written))
        return cls(tuple(steps))


_WALKS: dict[int, tuple[Block, _Walk]] = {}


def _walk(blk: Block) -> _Walk:
    """The block's walk, computed once per block object (the planner re-estimates one lowered
    graph many times)."""
    hit = _WALKS.get(id(blk))
    if hit is None or hit[0] is not blk:
        if len(_WALKS) > 4096:
            _WALKS.clear()
        hit = _WALKS[id(blk)] = (blk, _Walk.of(blk))
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


def step_timeline(
    graph: OpGraph,
    plan: ActivationPlan,
    setup: TrainingSetup,
    counts: ParamCounts,
    *,
    params_bytes: int,
    grads_bytes: int,
    optimizer_bytes: int,
    stored_activation_bytes: int,
    step_temporary_bytes: int,
    grads_resident: bool = True,
    activations_offloaded: bool = False,
    sharding: Sharding = NO_SHARDING,
    others_first: int = 0,
    others_later: int | None = None,
    buffer_bytes: int = 0,
    reshard: bool = True,
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
    ``buffer_bytes`` (DDP's gradient buckets) are on the GPU throughout; ``reshard`` False
    (FSDP ``reshard_after_forward=False``) keeps every layer's gathered weights from its
    forward until its backward.
    """
    T = setup.tokens
    V = graph.logits.numel // T if graph.logits else 0
    p = setup.activation_dtype
    g = setup.gradient_dtype.itemsize
    P, OPT = params_bytes + buffer_bytes, optimizer_bytes
    outside = graph.prologue_saved_bytes
    n = graph.num_layers
    layout = graph.layout
    # Backward starts at the LM head: its weight gradient (for a tied head, held in the
    # embedding's autograd input buffer until the embedding's own gradient arrives) and the
    # final norm's; then each block adds its projections' and its two norms' gradients.
    embedding_trains = any(w.trainable for op in graph.prologue for w in op.weights)
    tied = counts.head == 0 and embedding_trains
    head_grads = sum(w.grad_bytes(g) for op in graph.epilogue for w in op.weights) + (
        counts.lm_head_numel * g if tied else 0
    )
    block_grads = tuple(b.grad_bytes(g) for b in graph.kinds)
    all_block_grads = layout.total(block_grads)
    full_grads = counts.grad_bytes(g)
    block_params = tuple(b.param_numel for b in graph.kinds)

    w = setup.weight_dtype.itemsize

    def grads(value: int, bucket: int) -> int:
        """Gradient bytes on this GPU when ``value`` bytes of full gradients exist (``bucket``:
        the current block's full gradients, awaiting their reduce-scatter)."""
        if not grads_resident:
            return min(value, grads_bytes)
        if sharding.shards_gradients:
            return sharding.share(value, 2) + bucket
        return value

    def gathered(numel: int) -> int:
        """ZeRO-3 / FSDP: full weights all-gathered for the part that runs now."""
        return numel * w if sharding.shards_parameters else 0

    # torch.autocast caches the 16-bit weight casts until the autocast region ends (after the
    # loss): for recomputed blocks nothing else holds them, so they peak with the loss.
    weight_cache = sum(
        c * blk.weight_cast_bytes
        for blk, c in zip(graph.kinds, plan.fully_recomputed, strict=False)
    )
    residual_grad = graph.block(0).input.nbytes if n else 0
    walks = tuple(_walk(b) for b in graph.kinds)
    epilogue = graph.epilogue_saved_bytes
    has_loss = setup.loss is Loss.standard and graph.logits is not None

    # without resharding, the layers not yet through their backward stay gathered
    def unsharded_below(i: int) -> int:
        """Parameters of layers 0..i-1, still gathered without resharding (else none)."""
        return 0 if reshard else layout.prefix_sum(block_params, i)

    def make_pass(label: str, others: int, accumulated: bool) -> tuple[Pass, set[int]]:
        acts = stored_activation_bytes + others
        head: list[Moment] = []
        loss_grads = grads(full_grads, 0) if accumulated else 0
        if has_loss:
            logits = graph.logits.nbytes + (T * V * 4 if p is not DType.fp32 else 0) + weight_cache  # type: ignore[union-attr]
            head_p = P + gathered(counts.lm_head_numel + unsharded_below(n))
            head.append(
                Moment(
                    "forward", f"{label}loss: log_softmax", head_p, loss_grads, OPT, acts, logits
                )
            )
            head.append(
                Moment(
                    "backward",
                    f"{label}loss: _log_softmax_backward_data",
                    head_p,
                    loss_grads,
                    OPT,
                    acts,
                    2 * T * V * 4,
                )
            )

        def before(i: int) -> int:
            """Gradient bytes written before layer ``i``'s backward: all of them after an
            earlier micro-batch, else the head's and the later layers'."""
            if accumulated:
                return full_grads
            return head_grads + all_block_grads - layout.prefix_sum(block_grads, i + 1)

        def below(i: int) -> int:
            if activations_offloaded:
                return outside + (epilogue if i == n - 1 else 0) + others
            return outside + plan.held_below(i) + others

        def block_moment(i: int) -> Moment:
            kind = layout.kind_at(i)
            previous = layout.kind_at(i - 1) if i else kind  # prefetched by FSDP
            pbg, done = block_grads[kind], before(i)
            best = (0, "", 0, 0)
            for held, name, grad_bytes, written in walks[kind].steps:
                value = done if accumulated else done + min(written * g, pbg)
                gr = grads(value, pbg)
                if held + grad_bytes + gr > best[0] + best[2] + best[3]:
                    best = (held, name, grad_bytes, gr)
            held, name, transient, on_gpu = best
            numel = graph.kinds[kind].param_numel + graph.kinds[previous].param_numel
            if not reshard:
                numel = unsharded_below(i + 1) + (block_params[kind] if i else 0)
            return Moment(
                "backward",
                f"{label}block {first_layer + i}: {name}",
                P + gathered(numel),  # this block and the prefetched next
                on_gpu,
                OPT,
                below(i) + held,
                transient + residual_grad,
                layer=i,
            )

        tail: tuple[Moment, ...] = ()
        if graph.prologue:
            tied_transient = 2 * counts.lm_head_numel * g if tied else 0
            tail = (
                Moment(
                    "backward",
                    f"{label}embedding" + (" (tied weight add)" if tied_transient else ""),
                    P + gathered(counts.embedding),
                    grads(full_grads, block_grads[layout.kind_at(0)] if n else 0),
                    OPT,
                    outside + others,
                    tied_transient,
                ),
            )
        cap = None if grads_resident else grads_bytes
        candidates = _candidate_layers(plan, layout, walks, block_grads, g, before, cap)
        return Pass(label, tuple(head), tail, block_moment), candidates

    passes: list[tuple[Pass, set[int]]] = [make_pass("", others_first, False)]
    if others_later is not None:
        passes.append(make_pass("micro-batch 2+: ", others_later, True))
    step = Moment("optimizer step", "step()", P, grads(full_grads, 0), OPT, 0, step_temporary_bytes)
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
    return Timeline(tuple(pss for pss, _ in passes), step, n, peak)


def _candidate_layers(
    plan: ActivationPlan,
    layout: Layout,
    walks: tuple[_Walk, ...],
    block_grads: tuple[int, ...],
    g: int,
    before: Callable[[int], int],
    cap: int | None,
) -> set[int]:
    """Layers among which the largest block moment is. Along a family (``Family``) the bytes
    held below a layer and the gradients written before it change by the same amount at each
    step, so the moment is affine in the step -- largest at an end -- except (a) at a piece's
    first layer, whose predecessor (prefetched under FSDP) belongs to another piece: the
    second member is kept too; and (b) when gradients on the GPU are capped at ``cap``
    (params=cpu: min(written, cap) is concave): each op's moment is then largest at an end or
    where its gradients reach the cap, which is solved for directly."""
    out: set[int] = set()
    for fam in plan.stack.families(affine=cap is None):
        ends = {0, min(1, fam.count - 1), fam.count - 1}
        if cap is not None and fam.count > 2:
            step = before(fam.at(0)) - before(fam.at(1))
            if step > 0:
                kind = layout.kind_at(fam.first)
                start = before(fam.first)
                for _, _, _, written in walks[kind].steps:
                    w = min(written * g, block_grads[kind])
                    t = -(-(start + w - cap) // step)  # first member at or below the cap
                    ends |= {t - 1, t}
        out |= {fam.at(t) for t in ends if 0 <= t < fam.count}
    return out
