"""Megatron-core's ``GPTModel`` (``models/gpt/gpt_model.py``) lowered to the op graph:
``LanguageModelEmbedding``, the decoder's ``TransformerLayer`` s (each distinct layer type
once, laid out over the stack), the final norm, the output layer and the loss.

Which ModelSpec features Megatron-core builds is ``megatron_gap``: a spec it cannot build is
refused with the feature named (``--framework hf`` models it)."""

from __future__ import annotations

from dataclasses import replace

from memcalc.errors import MemcalcError
from memcalc.graph.blocks.megatron.embedding import language_model_embedding, rotary_table
from memcalc.graph.blocks.megatron.layer import transformer_layer
from memcalc.graph.blocks.megatron.output import output_and_loss
from memcalc.graph.layout import LayerLayout
from memcalc.graph.ops import OpGraph, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.megatron import (
    AttentionBackend,
    MegatronOptions,
    TokenDispatcher,
    TransformerImpl,
)
from memcalc.spec.megatron_setup import megatron_gap, requested_backend
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import Precision, TrainingSetup


def megatron_dims(dims: Dims, spec: ModelSpec, setup: TrainingSetup) -> Dims:
    """``dims`` with Megatron's padded vocabulary: ``vocab_size_with_padding``
    (``megatron/core/tokenizers/utils/build_tokenizer.py``) rounds V up to a multiple of
    ``make_vocab_size_divisible_by`` x tp; each rank holds V_padded / tp rows."""
    tp = setup.parallel.tp
    multiple = setup.megatron_options.make_vocab_size_divisible_by * tp
    padded = -(-spec.vocab_size // multiple) * multiple
    return replace(dims, V=padded // tp)


def check_buildable(spec: ModelSpec, setup: TrainingSetup) -> None:
    """The one-line error for a spec or setup Megatron-core cannot build (``megatron_gap``)."""
    gap = megatron_gap(spec, setup)
    if gap is not None:
        raise MemcalcError(
            f"--framework megatron: Megatron-core's GPT model has no {gap}; use --framework hf"
        )


def lower_megatron(spec: ModelSpec, setup: TrainingSetup, dims: Dims) -> OpGraph:
    """The op graph of one training step of Megatron-core's GPT model of ``spec``."""
    check_buildable(spec, setup)
    dims = megatron_dims(dims, spec, setup)
    opts = setup.megatron_options
    fp8 = setup.precision is Precision.fp8_mixed
    types = list(dict.fromkeys((*spec.first_layers, *spec.layer_pattern)))
    index = {t: i for i, t in enumerate(types)}
    layout = LayerLayout.periodic(
        [index[t] for t in spec.layer_pattern],
        spec.num_layers,
        head=[index[t] for t in spec.first_layers],
    )
    backend = requested_backend(setup)
    if opts.transformer_impl is TransformerImpl.local:
        backend = AttentionBackend.local  # the local spec's own DotProductAttention
        opts = opts.replace(attention_backend=backend)
    kinds = tuple(
        transformer_layer(Scope(fp8_linears=fp8), spec, dims, t, opts, backend) for t in types
    )
    pro = Scope()
    language_model_embedding(pro, spec, dims)
    rotary_table(pro, spec, dims, fused=opts.apply_rope_fusion)
    epi = Scope()
    logits, peaks = output_and_loss(
        epi, spec, dims, opts.cross_entropy_fusion, owns_weight=not spec.tie_embeddings
    )
    return OpGraph(
        tuple(pro.ops),
        kinds,
        layout,
        tuple(epi.ops),
        logits=logits,
        loss_peaks=peaks,
        persistent=global_memory_buffer(dims, opts, spec),
    )


def global_memory_buffer(dims: Dims, opts: MegatronOptions, spec: ModelSpec) -> tuple[Saved, ...]:
    """Megatron's ``GlobalMemoryBuffer`` (``megatron/core/utils.py``: one tensor per
    (name, dtype), grown to the largest request and kept): the ``"mpu"`` buffer serves the
    local ``DotProductAttention``'s ``matmul_input_buffer`` ([b x a/t, s, s],
    ``transformer/dot_product_attention.py``) and, under sequence parallelism, the output
    layer's all-gathered input ([T, h], ``tensor_parallel/layers.py``
    ``LinearWithGradAccumulationAndAsyncCommunication.forward``) and the all-gather MoE
    dispatcher's gathered hidden states ([T_rep x etp x ep, h], ``moe/token_dispatcher.py``
    ``MoEAllGatherTokenDispatcher.token_dispatch``)."""
    sizes = []
    allgather = opts.moe_token_dispatcher is TokenDispatcher.allgather
    if spec.moe_layers and allgather and dims.etp * dims.ep > 1:
        sizes.append(dims.T_rep * dims.etp * dims.ep * dims.h)
    if opts.attention_backend is AttentionBackend.local:
        sizes.append(dims.b * dims.a * dims.s * dims.s)
    if dims.sp and dims.tp > 1:
        sizes.append(dims.T * dims.h)
    if not sizes:
        return ()
    return (Saved("global_memory_buffer.mpu", max(sizes), dims.p),)
