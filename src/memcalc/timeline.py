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

    @property
    def total_bytes(self) -> int:
        return (
            self.parameter_bytes
            + self.gradient_bytes
            + self.optimizer_bytes
            + self.activation_bytes
            + self.transient_bytes
        )


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
) -> list[Moment]:
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
    """
    T = setup.tokens
    V = graph.logits.numel // T if graph.logits else 0
    p = setup.activation_dtype
    g = setup.gradient_dtype.itemsize
    P, OPT = params_bytes, optimizer_bytes
    outside = graph.prologue_saved_bytes
    n = len(graph.blocks)
    # Backward starts at the LM head: its weight gradient (for a tied head, held in the
    # embedding's autograd input buffer until the embedding's own gradient arrives) and the
    # final norm's; then each block adds its projections' and its two norms' gradients.
    head_grads = (counts.lm_head_numel + counts.final_norm) * g
    per_block_grads = counts.per_block * g
    full_grads = counts.total * g

    w = setup.weight_dtype.itemsize

    def grads(value: int, bucket: bool = True) -> int:
        """Gradient bytes on this GPU when ``value`` bytes of full gradients exist."""
        if not grads_resident:
            return min(value, grads_bytes)
        if sharding.shards_gradients:  # the current block's full gradients await reduce-scatter
            return sharding.share(value, 2) + (per_block_grads if bucket else 0)
        return value

    def gathered(numel: int) -> int:
        """ZeRO-3 / FSDP: full weights all-gathered for the part that runs now."""
        return numel * w if sharding.shards_parameters else 0

    moments: list[Moment] = []
    acts = stored_activation_bytes
    # torch.autocast caches the 16-bit weight casts until the autocast region ends (after the
    # loss): for recomputed blocks nothing else holds them, so they peak with the loss.
    weight_cache = sum(
        blk.weight_cast_bytes
        for blk, choice in zip(graph.blocks, plan.per_block, strict=False)
        if choice == "full"
    )
    if setup.loss is Loss.standard and graph.logits is not None:
        logits = graph.logits.nbytes + (T * V * 4 if p is not DType.fp32 else 0) + weight_cache
        head_p = P + gathered(counts.lm_head_numel)
        moments.append(Moment("forward", "loss: log_softmax", head_p, 0, OPT, acts, logits))
        moments.append(
            Moment(
                "backward", "loss: _log_softmax_backward_data", head_p, 0, OPT, acts, 2 * T * V * 4
            )
        )
    residual_grad = graph.blocks[0].input.nbytes
    running_grads = head_grads
    for i in range(n - 1, -1, -1):
        blk = graph.blocks[i]
        before = running_grads
        running_grads += per_block_grads
        if activations_offloaded:
            below = outside + (graph.epilogue_saved_bytes if i == n - 1 else 0)
        else:
            below = outside + sum(plan.block_stored[:i])
            below += plan.block_rebuilt_below[i] if plan.block_rebuilt_below else 0

        def grads_at(written: int, before: int = before) -> int:
            return grads(before + min(written * g, per_block_grads))

        held, where, transient, block_grads = _worst_op_in_backward(blk, grads_at)
        moments.append(
            Moment(
                "backward",
                f"block {i}: {where}",
                P + gathered(2 * counts.per_block),  # this block and the prefetched next
                block_grads,
                OPT,
                below + held,
                transient + residual_grad,
            )
        )
    tied_transient = 2 * counts.lm_head_numel * g if counts.head == 0 else 0
    moments.append(
        Moment(
            "backward",
            "embedding" + (" (tied weight add)" if tied_transient else ""),
            P + gathered(counts.embedding),
            grads(full_grads),
            OPT,
            outside,
            tied_transient,
        )
    )
    moments.append(
        Moment(
            "optimizer step",
            "step()",
            P,
            grads(full_grads, bucket=False),
            OPT,
            0,
            step_temporary_bytes,
        )
    )
    return moments


def _worst_op_in_backward(blk: Block, grads_at: Callable[[int], int]) -> tuple[int, str, int, int]:
    """Walking the block's ops backwards: (saved bytes still held, op, activation-gradient
    bytes, parameter-gradient bytes) at the op whose backward has the most bytes alive.

    A storage is held until the backward of the first op that saved it has run; the weight
    gradients of the ops after it already exist (``grads_at(elements written so far)``).
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
    best = (0, "", 0, 0)
    written = 0
    for op, held in zip(reversed(blk.ops), reversed(held_after), strict=True):
        written += op.params  # this op's backward writes its weight gradients
        grads = grads_at(written)
        if held + op.grad_bytes + grads > best[0] + best[2] + best[3]:
            best = (held, op.name, op.grad_bytes, grads)
    return best
