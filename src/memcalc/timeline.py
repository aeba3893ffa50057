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
from memcalc.graph.ops import Block, Component, OpGraph
from memcalc.params import ParamCounts
from memcalc.spec.training import DType, Loss, TrainingSetup
from memcalc.strategies.recompute import ActivationPlan, Recompute, Segments
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


@dataclass(frozen=True)
class _Walk:
    """One block kind's backward, moment by moment from its last op (only the moments no
    later one dominates: a later moment has at least as many gradients written)."""

    steps: tuple[_Step, ...]

    @classmethod
    def of(cls, blk: Block, mode: Recompute) -> _Walk:
        return cls(_undominated(_coarse(blk, mode)))


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
        steps.append(_Step(held, op.name, grads + residual, written, residual))
    return steps


_WALKS: dict[tuple[int, Recompute], tuple[Block, _Walk]] = {}


def _walk(blk: Block, mode: Recompute = Recompute.none) -> _Walk:
    """The block's walk, computed once per block object and mode (the planner re-estimates
    one lowered graph many times)."""
    hit = _WALKS.get((id(blk), mode))
    if hit is None or hit[0] is not blk:
        if len(_WALKS) > 4096:
            _WALKS.clear()
        hit = _WALKS[(id(blk), mode)] = (blk, _Walk.of(blk, mode))
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
    extra_grad_bytes: int = 0,
    grads_preallocated: bool = False,
    pipeline_first: tuple[int, int] = (0, 0),
    pipeline_later: tuple[int, int] = (0, 0),
    grad_received: bool = False,
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
    ``buffer_bytes`` (DDP's gradient buckets) are on the GPU throughout;
    ``grads_preallocated`` (DDP ``gradient_as_bucket_view``: the gradients are views of the
    buckets, allocated when DDP is built) puts every gradient there from the start.
    ``extra_grad_bytes``: gradient bytes beyond the parameters' own, written with the
    embedding's (DTensor's replicated vocab-parallel embedding gradient).

    ZeRO-3 is FSDP2 (``torch/distributed/fsdp/_fully_shard``, one group per block and the root
    group of everything else, as ``fully_shard`` per block then on the model wraps it): the
    root's parameters (embedding, final norm, head) stay gathered from the forward until the
    end of backward (torch's default for the root, ``reshard_after_forward=None``), and so do
    their gradients, reduce-scattered by the root's post-backward after the embedding's; a
    block's gradients are full only until its own post-backward reduce-scatters them, so
    during its backward only those written so far are full -- beside the input of the last
    reduce-scatter (the block above's full gradients, flat), which FSDP2 keeps until the next
    one (``reduce_scatter_max_input_buffers`` = 1, ``FSDPParamGroup.post_backward``). Forward
    keeps the last block's all-gather result until the root's post-forward
    (``FSDPParamGroup.wait_for_unshard`` frees a forward result after the next copy-out), so it
    is alive at the loss; backward prefetches the next block's all-gather
    (``_backward_prefetch``) while a block runs -- from the loss for the last block, none below
    block 0. ``reshard`` False (``reshard_after_forward=False``) keeps every layer's gathered
    weights from its forward until its backward, and nothing is prefetched.
    ``pipeline_first`` / ``pipeline_later`` (``torch.distributed.pipelining``, per pass):
    (bytes of the in-flight micro-batches' outputs the stage keeps until their backward --
    held through the backward moments --, bytes of their saved inputs that are the stage's
    receive buffers, already in ``buffer_bytes``); ``grad_received``: the gradient that enters
    the stage's last layer is the stage's receive buffer (in ``buffer_bytes``).
    Tensor parallelism through DTensor: ``loss_parallel``'s log-softmax
    (``torch/distributed/tensor/parallel/loss.py`` ``_log_softmax``) holds ``x - max`` beside
    its input and output, and its backward one more b*s*V/t fp32 tensor.
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
    full_grads = counts.grad_bytes(g) + extra_grad_bytes
    block_params = tuple(b.param_numel for b in graph.kinds)
    fsdp = sharding.shards_parameters
    root_numel = counts.total - layout.total(block_params)  # FSDP2's root group
    last_block = block_params[layout.kind_at(n - 1)] if n else 0

    w = setup.weight_dtype.itemsize

    def grads(value: int, bucket: int) -> int:
        """Gradient bytes on this GPU when ``value`` bytes of full gradients exist (``bucket``:
        the current block's full gradients, awaiting their reduce-scatter)."""
        if not grads_resident:
            return min(value, grads_bytes)
        if grads_preallocated:
            return full_grads
        if sharding.shards_gradients:
            return sharding.share(value, 2) + bucket
        return value

    def fsdp_grads(reduced: int, unreduced: int) -> int:
        """FSDP2: the blocks already reduce-scattered (``reduced``) are shards; the root's
        gradients and the current block's written so far (``unreduced``) are full."""
        if not grads_resident:
            return min(reduced + unreduced, grads_bytes)
        return sharding.share(reduced, 2) + unreduced

    def gathered(numel: int) -> int:
        """ZeRO-3 / FSDP2: full weights all-gathered for the parts that are unsharded now (the
        root group's always, from the forward to the end of backward)."""
        return (root_numel + numel) * w if fsdp else 0

    # torch.autocast caches the 16-bit weight casts until the autocast region ends (after the
    # loss): for recomputed blocks nothing else holds them, so they peak with the loss.
    weight_cache = sum(
        c * blk.weight_cast_bytes
        for blk, c in zip(graph.kinds, plan.fully_recomputed, strict=False)
    )

    def walk_at(i: int) -> _Walk:
        return _walk(graph.block(i), layer_mode(plan, i))

    epilogue = graph.epilogue_saved_bytes
    has_loss = setup.loss is Loss.standard and graph.logits is not None

    # without resharding, the layers not yet through their backward stay gathered
    def unsharded_below(i: int) -> int:
        """Parameters of layers 0..i-1, still gathered without resharding (else none)."""
        return 0 if reshard else layout.prefix_sum(block_params, i)

    # loss_parallel keeps one more b*s*V/t fp32 tensor in its log-softmax and its backward
    shifted = T * V * 4 if setup.parallel.dtensor_tp else 0

    def make_pass(
        label: str, others: int, accumulated: bool, pipeline: tuple[int, int]
    ) -> tuple[Pass, set[int]]:
        kept_outputs, aliased = pipeline
        others -= aliased  # saved inputs that are receive buffers: counted with the buffers
        acts = stored_activation_bytes + others
        head: list[Moment] = []
        loss_grads = grads(full_grads, 0) if accumulated or grads_preallocated else 0
        if has_loss:
            logits = graph.logits.nbytes + (T * V * 4 if p is not DType.fp32 else 0) + weight_cache  # type: ignore[union-attr]
            # FSDP2: the last block's all-gather result, kept until the root's post-forward
            # and prefetched again by the root's pre-backward (not needed without
            # resharding: every block is still gathered)
            head_p = P + gathered(last_block + unsharded_below(n))
            back_p = P + gathered((last_block if reshard else 0) + unsharded_below(n))
            head.append(
                Moment(
                    "forward",
                    f"{label}loss: log_softmax",
                    head_p,
                    loss_grads,
                    OPT,
                    acts,
                    logits + shifted,
                )
            )
            head.append(
                Moment(
                    "backward",
                    f"{label}loss: _log_softmax_backward_data",
                    back_p,
                    loss_grads,
                    OPT,
                    acts,
                    2 * T * V * 4 + shifted + kept_outputs,
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
            pbg, done = block_grads[kind], before(i)
            best = (0, "", 0, 0)
            # FSDP2 keeps the last reduce-scatter's input -- the block above's full gradients
            # -- until this block's post-backward (reduce_scatter_max_input_buffers = 1)
            pending = block_grads[layout.kind_at(i + 1)] if fsdp and i + 1 < n else 0
            # the gradient entering the stage's last layer is its receive buffer (counted)
            received = grad_received and i == n - 1
            for st in walk_at(i).steps:
                if fsdp and not accumulated:
                    unreduced = head_grads + min(st.written * g, pbg) + pending
                    gr = fsdp_grads(done - head_grads, unreduced)
                else:
                    value = done if accumulated else done + min(st.written * g, pbg)
                    gr = grads(value, pbg)
                transient = st.transient - (st.incoming if received else 0)
                if st.held + transient + gr > best[0] + best[2] + best[3]:
                    best = (st.held, st.name, transient, gr)
            held, name, transient, on_gpu = best
            # this block, and the next one's all-gather prefetched (none below block 0)
            numel = block_params[kind] + (block_params[layout.kind_at(i - 1)] if i else 0)
            if not reshard:
                numel = unsharded_below(i + 1)  # blocks 0..i, gathered since their forward
            return Moment(
                "backward",
                f"{label}block {first_layer + i}: {name}",
                P + gathered(numel),
                on_gpu,
                OPT,
                below(i)
                + checkpoint_held(graph, plan, i)
                - span_inputs_freed(graph, plan, i)
                + held,
                transient + kept_outputs,
                layer=i,
            )

        tail: tuple[Moment, ...] = ()
        if any(op.component is Component.embedding for op in graph.prologue):
            tied_transient = 2 * counts.lm_head_numel * g if tied else 0
            if fsdp and not accumulated:
                pending = block_grads[layout.kind_at(0)] if n else 0  # block 0's rs input
                emb_grads = fsdp_grads(all_block_grads, full_grads - all_block_grads + pending)
            else:
                emb_grads = grads(full_grads, block_grads[layout.kind_at(0)] if n else 0)
            tail = (
                Moment(
                    "backward",
                    f"{label}embedding" + (" (tied weight add)" if tied_transient else ""),
                    P + gathered(0),
                    emb_grads,
                    OPT,
                    outside + others,
                    tied_transient + kept_outputs,
                ),
            )
        cap = None if grads_resident else grads_bytes
        candidates = _candidate_layers(plan, layout, walk_at, block_grads, g, before, cap)
        if fsdp and n >= 2:
            candidates.add(n - 2)  # the first backward with a pending reduce-scatter input
        # a span input is held from its first layer up: the moments are affine on each side
        for start in _span_starts(graph, plan):
            for fam in plan.stack.progressions(affine=cap is None):
                t = -(-(start - fam.first) // fam.step)  # the first member at or above it
                candidates |= {fam.at(u) for u in (t - 1, t) if 0 <= u < fam.count}
        return Pass(label, tuple(head), tail, block_moment), candidates

    passes: list[tuple[Pass, set[int]]] = [make_pass("", others_first, False, pipeline_first)]
    if others_later is not None:
        passes.append(make_pass("micro-batch 2+: ", others_later, True, pipeline_later))
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
    return out


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
