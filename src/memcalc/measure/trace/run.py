"""Trace a module, a target or a spec: build under FakeTensorMode, record, assemble."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch
from torch import nn
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)

from memcalc.errors import MemcalcError
from memcalc.measure.build import Impl, torch_dtype
from memcalc.measure.trace.capture import (
    OpRecorder,
    Recorder,
    attention_calls,
    find_blocks,
    loss_and_logits,
    run_forward,
    storage_key,
)
from memcalc.measure.trace.common import Trace
from memcalc.measure.trace.fake import (
    SDPA_SPANS,
    cast_floating,
    gpu_kernels,
    grouped_mm_in_any_dtype,
    kept_in_fp32,
    unpacked_sequences,
)
from memcalc.measure.trace.graph import build_graph
from memcalc.measure.trace.params import param_counts, param_tensors
from memcalc.measure.trace.targets import one_line, resolve_target, spec_target
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup

# ---------------------------------------------------------------------------------------------
# Tracing


def trace_module(
    build: Callable[[], nn.Module],
    setup: TrainingSetup,
    *,
    name: str,
    vocab_size: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Trace:
    """Build ``build()`` under FakeTensorMode, run one training forward/backward on (B, S) token
    ids, and turn what autograd saved into an ``OpGraph`` (see the module docstring);
    ``progress`` is told as each part starts."""
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    batch, seq = setup.batch, setup.seq
    dtype = torch_dtype(setup.weight_dtype)  # fp32 under autocast (amp-*)
    autocast = (
        torch.autocast("cpu", dtype=torch_dtype(setup.activation_dtype))
        if setup.precision.is_amp
        else contextlib.nullcontext()
    )
    with FakeTensorMode(allow_non_fake_inputs=True), gpu_kernels():
        say("tracing: building the model")
        model = build()
        device = _device(model, name)
        keep = kept_in_fp32(model, dtype) if setup.keeps_fp32_modules else None
        cast_floating(model, dtype, keep).train()
        _, blocks = find_blocks(model)
        modules = dict(model.named_modules(remove_duplicate=False))
        paths = {id(m): p for p, m in modules.items()}
        exclude = {storage_key(t) for t in (*model.parameters(), *model.buffers())}
        rec = Recorder(exclude, {id(b): i for i, b in enumerate(blocks)}, paths)
        handles = []
        for m in modules.values():
            handles.append(m.register_forward_pre_hook(rec.pre, with_kwargs=True))
            handles.append(m.register_forward_hook(rec.post, with_kwargs=True, always_call=True))
        vocab = vocab_size or _embedding_rows(model) or 2
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        try:
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                with (
                    unpacked_sequences(),
                    grouped_mm_in_any_dtype(),
                    attention_calls(model, rec),
                    OpRecorder(rec),
                    autocast,
                ):
                    say("tracing: forward")
                    out = run_forward(model, ids)
                    loss, logits = loss_and_logits(out, ids)
            say("tracing: op graph")
            epilogue = {p for p, s in rec.first_scope_of_module.items() if s == len(blocks)}
            params = param_tensors(model, blocks, epilogue, dtype).tensors
            spans = list(SDPA_SPANS)
            built = build_graph(rec, blocks, modules, loss, logits, batch, seq, spans, params)
            say("tracing: backward")
            loss.backward()
        except MemcalcError:
            raise
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            raise MemcalcError(
                f"{name}: tracing failed: the forward reads tensor values ({e.func}: .item(), "
                "nonzero, or control flow on data), which FakeTensorMode cannot know"
            ) from None
        except Exception as e:  # user code under fake tensors: one line
            raise MemcalcError(f"{name}: tracing failed: {one_line(e)}") from None
        finally:
            for h in handles:
                h.remove()
        counts = param_counts(model, blocks, epilogue, dtype)

    notes = []
    if built.dead_branch_bytes:
        notes.append(
            f"{built.dead_branch_bytes} saved bytes on dead branches (no path to the loss, "
            "freed before backward): not counted"
        )
    return Trace(
        name=name,
        graph=built.graph,
        counts=counts,
        seconds=time.perf_counter() - start,
        tied=counts.head == 0,
        dead_branch_bytes=built.dead_branch_bytes,
        notes=tuple(notes),
    )


def _device(model: nn.Module, name: str) -> torch.device:
    """Where the model's parameters are (the token ids go there too).

    Real (allocated) parameters would be converted on the fly and counted as activations, and
    fake tensors of a device this torch was not built for abort the process in autograd: both
    are errors.
    """
    tensors = [*model.parameters(), *model.buffers()]
    if any(not isinstance(t, FakeTensor) for t in tensors):
        raise MemcalcError(
            f"{name}: the model's parameters are real, allocated tensors; construct the model "
            "inside the function (trace calls it under FakeTensorMode), not before"
        )
    devices = {t.device for t in tensors}
    for d in devices:
        if d.type == "cuda" and not torch.cuda.is_available():
            raise MemcalcError(
                f"{name}: the model is on {d}, and this torch has no CUDA; build it on the CPU "
                "(the trace allocates nothing)"
            )
    if len(devices) > 1:
        raise MemcalcError(f"{name}: parameters on several devices: {sorted(map(str, devices))}")
    return devices.pop() if devices else torch.device("cpu")


def _embedding_rows(model: nn.Module) -> int | None:
    rows = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)]
    return max(rows) if rows else None


# ---------------------------------------------------------------------------------------------
# Entry points


def trace_target(target: str, setup: TrainingSetup, impl: Impl = Impl.ours) -> Trace:
    """Trace a preset / spec file (with ``impl``), an HF config.json, or ``module:function``."""
    t = resolve_target(target, setup, impl)
    return trace_module(t.build, setup, name=t.name, vocab_size=t.vocab_size)


def trace_spec(spec: ModelSpec, setup: TrainingSetup, impl: Impl = Impl.ours) -> Trace:
    """Trace a ModelSpec built as memcalc's reference model (``ours``) or HF's (``hf``)."""
    t = spec_target(spec, setup, impl)
    return trace_module(t.build, setup, name=t.name, vocab_size=t.vocab_size)


def describe(trace: Trace) -> str:
    """One line for stderr: what was found and how long it took."""
    return (
        f"traced {trace.name}: {trace.graph.num_layers} blocks, {trace.num_ops} ops "
        f"in {trace.seconds:.2f}s (FakeTensorMode: no memory allocated)"
    )
