"""Pipeline parallelism on one rank: its stage of memcalc's reference model under torch's
``torch.distributed.pipelining`` (``PipelineStage`` + ``Schedule1F1B``).

The stage holds its layers as the estimate splits them (``strategies/pipeline.layer_split``:
the first L mod p stages one more), the embedding on the first stage, the final norm, LM head
and loss on the last (a tied head gets its own copy of the embedding there, as Megatron keeps
it). One step is ``schedule.step`` over ``microbatches`` micro-batches of ``batch`` sequences,
then ``optimizer.step()``; a warm-up step first. Forwards and backwards interleave, so the
stored activations are the most bytes of saved tensors held at once (``HeldSavedRecorder``:
several micro-batches' on the first stages), and the peak is the tracker's over the schedule
and the optimizer step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from memcalc.measure.distributed.launch import Request
from memcalc.measure.reference_model import Transformer, causal_lm_loss
from memcalc.measure.runner import (
    Measurement,
    _optimizer_bytes,
    _trainer,
    _unique_bytes,
)
from memcalc.measure.strategies import apply_strategy
from memcalc.measure.tracker import HeldSavedRecorder, LiveMemoryTracker, storage_keys
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.pipeline import layer_split


class StageModule(nn.Module):
    """Layers ``first .. first + count - 1`` of a reference Transformer, with the embedding on
    the first stage and the final norm + LM head on the last (logits out; the schedule's
    ``loss_fn`` is the model's causal-LM loss)."""

    def __init__(
        self, model: Transformer, first: int, count: int, *, is_first: bool, is_last: bool
    ) -> None:
        super().__init__()
        self.cfg = model.cfg
        self.is_first, self.is_last = is_first, is_last
        self.dtype = model.wte.weight.dtype
        if is_first:
            self.wte = model.wte
            if self.cfg.family == "gpt2":
                self.wpe = model.wpe
        if self.cfg.family != "gpt2":
            self.register_buffer("inv_freq", model.inv_freq, persistent=False)
        self.h = nn.ModuleList(model.h[first : first + count])
        if is_last:
            self.ln_f = model.ln_f
            if model.lm_head is not None:
                self.lm_head: nn.Module | None = model.lm_head
                self.head_weight: nn.Parameter | None = None
            else:  # tied: the last stage keeps its own copy (Megatron's output layer)
                self.lm_head = None
                self.head_weight = nn.Parameter(model.wte.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        B, T = x.shape[:2]
        device = x.device
        pos = torch.arange(T, device=device).unsqueeze(0)  # (1, T)
        if self.is_first:
            ids = x
            x = self.wte(ids)  # (B, T, C)
            if cfg.family == "gpt2":
                x = F.dropout(x + self.wpe(pos), cfg.embd_pdrop, self.training)
        rope = mask = None
        if cfg.family != "gpt2":
            rope = Transformer._rope(self, T, self.dtype, device)  # type: ignore[arg-type]
        if cfg.attention == "eager":
            mask = Transformer._causal_mask(self, B, T, self.dtype, device)  # type: ignore[arg-type]
        for block in self.h:
            if cfg.family == "gpt2":
                x = block(x, mask)
            else:
                x = block(x, mask=mask, rope=rope, position_ids=pos)
        if not self.is_last:
            return x
        x = self.ln_f(x)
        if self.lm_head is not None:
            return self.lm_head(x)  # type: ignore[no-any-return]
        return F.linear(x, self.head_weight)  # (B, T, V)


def measure_stage(
    model: nn.Module,
    request: Request,
    spec: ModelSpec,
    setup: TrainingSetup,
    rank: int,
    device: torch.device,
    notes: list[str],
    phase: list[str],
) -> Measurement:
    """This rank's stage, one warm-up and one measured 1F1B step."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    par = setup.parallel
    assert isinstance(model, Transformer)  # check_layout allows --framework reference only
    first, count = layer_split(spec.num_layers, par.pp)[rank]
    is_first, is_last = rank == 0, rank == par.pp - 1
    stage_module = StageModule(model, first, count, is_first=is_first, is_last=is_last)
    del model
    label = apply_strategy(stage_module, request.recompute, every=request.every)
    trainer = _trainer(stage_module, setup, offload_optimizer=False)
    stage = PipelineStage(stage_module, rank, par.pp, device)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return causal_lm_loss(logits, labels, spec.vocab_size)

    schedule = Schedule1F1B(stage, n_microbatches=par.microbatches, loss_fn=loss_fn)
    gen = torch.Generator(device="cpu").manual_seed(request.seed)
    ids = torch.randint(
        0, spec.vocab_size, (setup.batch * par.microbatches, setup.seq), generator=gen
    ).to(device)

    def pipeline_step() -> None:
        trainer.zero_grad()
        phase[0] = "1F1B schedule"
        if is_first:
            schedule.step(ids)
        elif is_last:
            schedule.step(target=ids, losses=[], return_outputs=False)
        else:
            schedule.step()

    pipeline_step()  # warm-up (creates the optimizer state)
    trainer.step()
    params = trainer.params
    recorder = HeldSavedRecorder.for_module(stage_module)
    recorder.exclude |= {k for q in trainer.opt_params for k in storage_keys(q)}
    tracker = LiveMemoryTracker()
    opt_b = _optimizer_bytes(trainer, params[0].device)
    buffers = recv_buffers(stage)
    with tracker:
        tracker.register([params, trainer.opt_params, trainer.state_tensors(), ids, buffers])
        tracker.reset_peak()
        tracker.phase = "1F1B schedule"
        with recorder.hooks():
            pipeline_step()
        grads = trainer.grads
        tracker.phase = "optimizer step"
        phase[0] = "optimizer step"
        trainer.step()
    notes.append(
        f"pipeline stage {rank} of {par.pp} (layers {first}-{first + count - 1}), "
        f"Schedule1F1B over {par.microbatches} micro-batches; stored activations = the most "
        "saved-tensor bytes held at once"
    )
    m: dict[str, Any] = {
        "parameter_bytes": _unique_bytes(list(params)),
        "gradient_bytes": _unique_bytes(grads),
        **opt_b,
        "activation_bytes": recorder.peak_held_bytes,
        "peak_bytes": tracker.peak_bytes,
        "peak_phase": tracker.peak_phase,
        "saved_by_dtype": recorder.bytes_by_dtype(),
    }
    checked = request.recompute.value == "none"
    if not checked:
        notes.append(
            "stored activations not checked: under recompute a checkpoint's closure keeps "
            "tensors that saved-tensor hooks do not see, and the stage's forwards and backwards "
            "interleave"
        )
    return Measurement(
        device=device.type,
        impl=request.impl.value,
        strategy=label,
        notes=tuple(notes),
        activations_checked=checked,
        **m,
    )


def recv_buffers(stage: Any) -> list[torch.Tensor]:
    """The stage's receive buffers, made once per micro-batch and kept across steps
    (``_PipelineStageBase.args_recv_info`` for activations, ``grad_recv_info`` for
    gradients)."""
    out: list[torch.Tensor] = []
    for infos in (*stage.args_recv_info.values(), *stage.grad_recv_info.values()):
        for info in infos:
            buffer = getattr(info, "buffer", None)
            if isinstance(buffer, torch.Tensor):
                out.append(buffer)
    return out
