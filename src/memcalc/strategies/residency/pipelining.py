"""What a pipeline runtime keeps on a stage beyond its activations."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.graph.ops import OpGraph
from memcalc.strategies.pipeline import Stage


@dataclass(frozen=True)
class PipelineRetention:
    """The pipeline's own bytes on one stage (none without a pipeline, or under Megatron's
    schedules, which free each sent output and receive into fresh buffers)."""

    buffer_bytes: int = 0
    """Receive buffers kept across steps."""
    first: tuple[int, int] = (0, 0)
    """At the first backward: (outputs of the in-flight micro-batches, kept until their
    backward; saved inputs that are receive buffers, already in ``buffer_bytes``)."""
    later: tuple[int, int] = (0, 0)
    """The same at a later backward."""
    grad_received: bool = False
    """The gradient entering the stage's last layer is a receive buffer."""
    after_step: int = 0
    """Bytes the runtime still references once the step is over (not at the step's peak)."""

    @property
    def note(self) -> str:
        if self.after_step and not self.buffer_bytes:
            return (
                f"Megatron pipeline: {self.after_step:,} bytes kept after the step (each model "
                "chunk's last received input and its gradient, TransformerBlock.input_tensor)"
            )
        if not self.buffer_bytes:
            return ""
        return (
            f"torch.distributed.pipelining: {self.buffer_bytes} bytes of receive buffers (one "
            "per micro-batch, kept across steps); each in-flight micro-batch's output is kept "
            "until its backward"
        )


NO_RETENTION = PipelineRetention()


def megatron_pipeline(graph: OpGraph, microbatches: int, stage: Stage) -> PipelineRetention:
    """Megatron-LM's schedules: a sent output's data is freed (``schedules.py``
    ``deallocate_output_tensor``) and inputs are received into fresh tensors, so nothing is
    kept during the step beyond the activations. After it, each model chunk of a stage that
    receives its input still holds the last micro-batch's input and that input's gradient:
    ``forward_step`` hands the received tensor to ``set_input_tensor``, which
    ``TransformerBlock.set_input_tensor`` keeps as ``self.input_tensor`` until the next
    forward, and ``backward_step`` ``retain_grad()`` s it (``x.grad`` is the gradient it
    sends back)."""
    if stage.is_first or not graph.num_layers:
        return NO_RETENTION
    stream = graph.block(0).input.nbytes
    return PipelineRetention(after_step=2 * stream * max(len(stage.chunks), 1))


def torch_pipelining(graph: OpGraph, microbatches: int, stage: Stage) -> PipelineRetention:
    """A ``PipelineStage`` under ``Schedule1F1B`` (``torch/distributed/pipelining/stage.py``):
    a stage receives each micro-batch's input into its own buffer (made once, reused every
    step), and its output's gradient likewise; it keeps every in-flight micro-batch's output
    (the logits on the last stage) until that micro-batch's backward. When the first layer
    saves its input, that saved tensor is the receive buffer (counted once). A later backward
    also finds the previous micro-batch's input gradient held by its pending send (the
    schedule waits on sends at its next action)."""
    if not graph.num_layers:
        return NO_RETENTION
    m = microbatches
    stream = graph.block(0).input.nbytes  # the residual stream between stages
    first_block = graph.kinds[graph.layout.kind_at(0)]
    saves_input = any(
        saved.name == first_block.input.name for op in first_block.ops for saved in op.saves
    )
    buffers = (0 if stage.is_first else m * stream) + (0 if stage.is_last else m * stream)
    output = graph.logits.nbytes if stage.is_last and graph.logits else stream
    aliased = stream if saves_input and not stage.is_first else 0
    first = (stage.in_flight * output, stage.in_flight * aliased)
    pending_send = 0 if stage.is_first else stream
    later = (stage.in_flight_later * output + pending_send, stage.in_flight_later * aliased)
    return PipelineRetention(buffers, first, later, grad_received=not stage.is_last)
