"""Lower a ModelSpec + TrainingSetup into the op graph of one training step.

The graph is composed from building blocks (``graph/blocks/``), each mirroring one piece of the
real implementation and declaring exactly the tensors autograd saves for it, with their dtype.
The sources are the autograd formulas in PyTorch's ``tools/autograd/derivatives.yaml`` and the
HF modeling files (transformers 5.x); the GPT-2 lowering reproduces the reference measurements
in ``shared/reference`` to the byte. Each distinct layer type is lowered once
(``decoder_block``) and laid out over the stack (``LayerLayout``), so the cost does not grow with
depth.
"""

from __future__ import annotations

from dataclasses import replace

from memcalc.errors import MemcalcError
from memcalc.frameworks import ModelCode
from memcalc.frameworks.features import RotaryCache
from memcalc.graph.blocks.attention import sliding_mask
from memcalc.graph.blocks.block import decoder_block
from memcalc.graph.blocks.embedding import embeddings, rotary_tables
from memcalc.graph.blocks.head import head_and_loss
from memcalc.graph.blocks.moe import aux_loss
from memcalc.graph.layout import LayerLayout
from memcalc.graph.ops import Block, Component, OpGraph, Saved, SpanInput
from memcalc.graph.scope import Dims, FineTune, Scope
from memcalc.spec.families import family_of
from memcalc.spec.families.base import Implementation
from memcalc.spec.finetune import AdapterDtype, Quantize
from memcalc.spec.model import LayerType, ModelSpec, Positions
from memcalc.spec.peft_lora import peft_targets
from memcalc.spec.training import Attention, DType, Precision, TrainingSetup


def _scope(
    setup: TrainingSetup, finetune: FineTune | None = None, impl: Implementation | None = None
) -> Scope:
    """A scope whose linears follow the precision recipe (fp8 saved inputs, autocast casts)
    and the fine-tuning (frozen base, adapters); ``impl``: the HF code's fp32-kept router."""
    autocast = setup.activation_dtype if setup.precision.is_amp else None
    par = setup.parallel
    return Scope(
        router_weight_fp32=impl is not None
        and impl.router_weight_fp32
        and setup.framework_def.model_code is ModelCode.hf
        and setup.keeps_fp32_modules,
        fp8_linears=setup.precision is Precision.fp8_mixed,
        autocast=autocast,
        finetune=finetune,
        gathered_inputs=par.sequence_parallel
        and setup.framework_def.tensor_parallel.saves_gathered_input,
    )


def implementation(spec: ModelSpec, setup: TrainingSetup) -> Implementation:
    """The family's implementation as the setup's framework writes it: HF's own, or with the
    framework's model-code overrides (``Framework.layer_code``); a family the framework has no
    model for is refused."""
    impl = family_of(spec).impl
    fw = setup.framework_def
    code = fw.layer_code
    if code.families is None:
        return impl
    family = spec.family.value
    if family not in code.families:
        raise MemcalcError(
            f"--framework {fw.label}: it has no model for the {family} family; it runs: "
            f"{', '.join(code.families)} ({code.source})"
        )
    return replace(impl, **code.overrides_for(family))


BLOCK_SIZE = 128
"""FlexAttention's default block size (``torch/nn/attention/flex_attention.py``
``_DEFAULT_SPARSE_BLOCK_SIZE``)."""


def _block_mask(sc: Scope, dims: Dims) -> None:
    """FlexAttention's ``BlockMask`` (torchtitan ``get_attention_masks``, once per step, read by
    every layer's ``flex_attention``, which saves its tensors): ``kv_num_blocks`` and
    ``q_num_blocks`` (b x 1 x n int32, n = ceil(s / 128)), ``kv_indices`` and ``q_indices``
    (b x 1 x n x n int32), and the same four for the full blocks."""
    n = -(-dims.s // BLOCK_SIZE)
    numel = 4 * dims.b * n + 4 * dims.b * n * n
    sc.add(
        "flex_block_mask",
        Component.attention,
        [Saved("flex.block_mask", numel, DType.int32)],
        0,
        "create_block_mask: BlockMask tensors saved by every layer's flex_attention",
    )


def finetune_of(spec: ModelSpec, setup: TrainingSetup, impl: Implementation) -> FineTune | None:
    """What a LoRA setup trains, resolved for this family as PEFT 0.21.2 resolves it under
    transformers 5 (``spec/peft_lora.py``): its default targets, the MoE conversion
    to ``lora.ParamWrapper`` on the fused experts and the router, and PEFT's refusals."""
    lora = setup.lora
    if lora is None:
        return None
    resolved = peft_targets(
        spec.family.value, lora.targets, impl.lora_targets, impl.peft_moe, lora.dropout
    )
    # modules_to_save as HF names them (GPT-2's wte), as the ops are named (embed_tokens)
    saved = {impl.op_module(m) for m in lora.modules_to_save}
    trained = set(saved)
    if lora.train_embeddings:
        # the family's own module names (GPT-NeoX's embed_in), as measure trains the modules
        # get_input_embeddings() / get_output_embeddings() return (measure/finetune.py
        # train_embeddings) -- but a head tied to an embedding in modules_to_save shares the
        # frozen original, and stays frozen
        embed, head = (FineTune.leaf(impl.names[k]) for k in ("embed_tokens", "lm_head"))
        trained.add(embed)
        if not (spec.tie_embeddings and embed in saved and head not in saved):
            trained.add(head)
    return FineTune(
        adapted=resolved.modules,
        rank=lora.rank,
        dropout=lora.dropout,
        adapter_dtype=DType.fp32 if lora.adapter_dtype is AdapterDtype.fp32 else None,
        trained=frozenset(trained),
        quantize=setup.quantize.value,
        upcast=setup.prepared_for_kbit,
        copied=frozenset(saved),
        excluded=resolved.excluded,
        not_linear=frozenset(_not_linear(spec, impl, resolved.modules)),
        wrapped=tuple(sorted(resolved.params.items())),
    )


def _not_linear(spec: ModelSpec, impl: Implementation, modules: frozenset[str] | None) -> set[str]:
    """The router's leaf name: every transformers 5.24 MoE router is a module of its own with
    a weight parameter, no ``nn.Linear`` (``MixtralTopKRouter``, ``Qwen2MoeTopKRouter``,
    ``Qwen3MoeTopKRouter``, ``DeepseekV2TopkRouter``, ``DeepseekV3TopkRouter``), so
    ``all-linear`` skips it (``_maybe_include_all_linear_layers``) and naming it is refused
    (``LoraModel._create_new_module``: not a supported module type)."""
    if spec.moe is None:
        return set()
    leaf = FineTune.leaf(impl.names["router"])
    if modules is not None and leaf in modules:
        raise MemcalcError(
            f"--lora-targets: PEFT cannot adapt {leaf}, the {spec.family.value} router: it is no "
            'nn.Linear in transformers 5.24 ("Target module ... is not supported", '
            "peft/tuners/lora/model.py _create_new_module); name other targets or all-linear"
        )
    return {leaf}


DEVICES = ("cuda", "cpu", "traced")
"""The kernel sets a graph is lowered for: a GPU's; a CPU's (``memcalc measure`` on a CPU); and
what ``memcalc trace`` runs under FakeTensorMode (CPU kernels, but SDPA with dropout as flash
and bool dropout masks, as on a GPU: ``measure/trace/fake.py`` ``gpu_kernels``)."""


def dims_of(spec: ModelSpec, setup: TrainingSetup, device: str = "cuda") -> Dims:
    """The sizes of one step of ``spec`` under ``setup`` on ``device`` (one of DEVICES)."""
    if device not in DEVICES:
        raise ValueError(f"device: one of {', '.join(DEVICES)}, not {device!r}")
    cpu_kernels = device != "cuda"
    p = setup.activation_dtype
    # bitsandbytes returns a quantized matmul's output in its input's dtype (Linear4bit.forward:
    # ``.to(inp_dtype)``; CUDA MatMul8bitLt: ``int8_scaled_mm(..., dtype=A.dtype)``) -- fp32
    # under autocast too, whose stream is fp32 -- except the CPU LLM.int8 path under autocast
    # (MatMul8bitFp.forward runs F.linear(A, CB) inside the autocast region: 16 bits)
    int8_autocast = cpu_kernels and setup.quantize is Quantize.int8 and setup.precision.is_amp
    amp_quantized = setup.precision.is_amp and setup.quantize is not Quantize.none
    if (setup.prepared_for_kbit or amp_quantized) and not int8_autocast:
        # PEFT's k-bit preparation makes the embeddings, norms and LM head fp32: the residual
        # stream, the norms' outputs and (bitsandbytes casts each matmul's output back to its
        # input's dtype) every activation are fp32; only the quantized matmuls run in 16 bits.
        p = DType.fp32
    r = DType.fp32 if setup.precision.is_amp else p
    t = setup.parallel.tp
    moe = spec.moe
    capacity = setup.capacity_factor
    if moe is not None and capacity is None:
        capacity = moe.capacity_factor
    dims = Dims(
        b=setup.batch,
        s=setup.seq // setup.parallel.cp,
        h=spec.hidden_size,
        a=_split(spec.num_heads, t, "num_heads"),
        d=spec.head_size,
        # Megatron splits the key/value heads; with fewer kv heads than ranks each rank keeps
        # one, replicated.
        g=_split(spec.kv_heads, t, "num_kv_heads") if spec.kv_heads >= t else 1,
        m=_split(spec.mlp_size, t, "intermediate_size"),
        V=-(-spec.vocab_size // t),  # vocab-parallel embedding and head (Megatron pads it)
        p=p,
        r=r,
        stat_dtype=DType.fp32 if (not cpu_kernels or r is DType.fp32) else r,
        pow_in_fp32=setup.precision.is_amp and not cpu_kernels,
        cp=setup.parallel.cp,
        cp_rotate=(
            setup.parallel.cp_rotate if setup.framework_def.torch_context_parallel else None
        ),
        tp=t,
        sp=setup.parallel.sequence_parallel,
        experts=moe.num_experts // setup.parallel.ep if moe else 0,
        ep=setup.parallel.ep if moe else 1,
        etp=(setup.parallel.etp or t) if moe else 1,
        expert_m=_split(moe.expert_size, t, "moe_intermediate_size") if moe else 0,
        shared_m=_split(moe.shared_size, t, "shared expert width") if moe else 0,
        moe_imbalance=setup.moe_imbalance,
        capacity_factor=capacity,
        cpu=cpu_kernels,
        cpu_dropout_sdpa=device == "cpu",
    )
    if dims.sp and dims.s % t:
        # Megatron-core tensor_parallel/mappings.py _split_along_first_dim: the [s, b, h]
        # activations are scattered along s, which must divide evenly over the tp ranks
        raise MemcalcError(
            f"--seq: sequence parallelism splits each rank's {dims.s} tokens of a sequence "
            f"(seq / cp) over tp ({t}) ranks: tp must divide them (or --no-sp)"
        )
    return dims


def _split(n: int, ranks: int, what: str) -> int:
    """``n`` / ``ranks``, which must divide it (Megatron's rule for heads and MLP width)."""
    if n % ranks:
        raise MemcalcError(f"--tp: {ranks} does not divide {what} ({n})")
    return n // ranks


_CACHE: dict[tuple[object, ...], OpGraph] = {}
_CACHE_SIZE = 512


def lower_cached(spec: ModelSpec, setup: TrainingSetup, *, device: str = "cuda") -> OpGraph:
    """``lower``, remembered for the setup fields the lowering reads (the planner estimates one
    graph under many data-parallel sizes, ZeRO stages, offloads and pipeline splits)."""
    check = BUILD_CHECKS.get(setup.framework_def.model_code)
    if check is not None:
        check(spec, setup)  # it reads setup fields beyond the key (the ZeRO stage)
    key = lowering_key(spec, setup, device)
    graph = _CACHE.get(key)
    if graph is None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        graph = _CACHE[key] = lower(spec, setup, device=device)
    return graph


def lowering_key(spec: ModelSpec, setup: TrainingSetup, device: str) -> tuple[object, ...]:
    """What ``lower`` reads: two setups with one key lower to the same graph (checked field
    by field in tests/test_layout.py)."""
    par = setup.parallel
    return (
        spec,
        setup.batch,
        setup.seq,
        setup.precision,
        setup.attention,
        setup.loss,
        setup.dropout,
        par.tp,
        par.sequence_parallel,
        setup.framework_def.tensor_parallel if par.tp > 1 else None,
        setup.framework_def.model_code,
        setup.keeps_fp32_modules,
        setup.megatron,
        setup.framework_def.layer_code,
        par.cp,
        par.cp_rotate if par.cp > 1 else None,
        setup.framework_def.torch_context_parallel,
        par.ep,
        par.etp,
        setup.moe_imbalance,
        setup.capacity_factor,
        setup.lora,
        setup.quantize,
        setup.prepared_for_kbit,
        setup.embedding_output_requires_grad,
        device,
    )


def lower(spec: ModelSpec, setup: TrainingSetup, *, device: str = "cuda") -> OpGraph:
    """The op graph of one training step of ``spec`` under ``setup``, in the model code of its
    framework (HF's or memcalc's reference model: ``lower_hf``; Megatron-core's:
    ``graph/blocks/megatron/model.py``)."""
    if setup.dropout is not None:
        spec = spec.with_dropout(setup.dropout)
    return LOWERINGS[setup.framework_def.model_code](spec, setup, device)


def _check_megatron(spec: ModelSpec, setup: TrainingSetup) -> None:
    from memcalc.graph.blocks.megatron.model import check_buildable

    check_buildable(spec, setup)


BUILD_CHECKS = {ModelCode.megatron_core: _check_megatron}
"""What a model code refuses to build, checked on every (cached) lowering."""


def _lower_megatron(spec: ModelSpec, setup: TrainingSetup, device: str) -> OpGraph:
    from memcalc.graph.blocks.megatron.model import lower_megatron

    return lower_megatron(spec, setup, dims_of(spec, setup, device))


def lower_hf(spec: ModelSpec, setup: TrainingSetup, device: str = "cuda") -> OpGraph:
    """The op graph of one training step of ``spec`` under ``setup`` as HF transformers (or
    memcalc's reference model, the same ops) runs it.

    ``device='cpu'`` mirrors the CPU kernels where they store differently (LayerNorm statistics
    in the input dtype, SDPA with dropout as the math kernel), for comparing with CPU
    measurements; ``device='traced'`` the kernels ``memcalc trace`` runs (see DEVICES).

    Korthikanti et al. 2022 (eq. 1), GPT-2 shape, 16-bit, eager, dropout: ~sbh(34 + 5as/h)
    per block; this lowering is that plus HF's 3 extra GELU tensors (gelu_new) and fp32 stats.
    """
    impl = implementation(spec, setup)
    if setup.attention is Attention.sdpa and impl.sdpa_refused:
        raise MemcalcError(
            f"--attention sdpa: the HF {spec.family.value} implementation has no SDPA attention "
            f"({impl.sdpa_refused}); use --attention eager or --attention flash"
        )
    dims = dims_of(spec, setup, device)
    ft = finetune_of(spec, setup, impl)
    # the first layer is a kind of its own when its input needs no gradient
    first_grad = setup.embedding_output_requires_grad or (
        # a trained embedding (modules_to_save) has an output that requires grad
        ft is not None and ft.trains(impl.names["embed_tokens"])
    )
    types, layout = _layer_kinds(spec, first_grad)
    index = {t: i for i, t in enumerate(types)}
    counts = layout.counts(len(types))
    kinds: list[Block] = []
    shared: dict[str, Saved] = {}
    linears: set[str] = set()
    for t, grad in types:
        sc = _scope(setup, ft, impl)
        kinds.append(decoder_block(sc, spec, impl, dims, t, setup.attention, input_grad=grad))
        if counts[index[(t, grad)]]:
            shared.update(sc.shared)
            linears |= sc.linears
    if ft is not None and ft.adapted is not None and not ft.adapted <= linears:
        unknown = ", ".join(sorted(ft.adapted - linears))
        raise MemcalcError(
            f"--lora-targets: no linear layer named {unknown}; {spec.name} has: "
            f"{', '.join(sorted(linears))} (or all-linear)"
        )

    present = list(dict.fromkeys(t for (t, _), n in zip(types, counts, strict=True) if n))
    pro = Scope(finetune=ft)
    table = _prologue(pro, spec, impl, dims, setup, present, shared, first_grad)
    extra = _checkpoint_kept(spec, impl, dims, setup, present)
    span_inputs = _span_inputs(spec, impl, dims, types, present, extra, table)

    epi = _scope(setup, ft)
    logits, transient = head_and_loss(epi, spec, impl, dims, setup.loss)
    if spec.moe is not None and spec.moe.aux_loss and spec.moe_layers:
        transient += aux_loss(epi, spec, impl, dims)
    cache = _rotary_cache_bytes(spec, impl, dims, setup.seq)
    per_layer = impl.rotary_cache is RotaryCache.per_layer
    return OpGraph(
        tuple(pro.ops),
        tuple(kinds),
        layout,
        tuple(epi.ops),
        extra,
        logits,
        transient,
        tuple(span_inputs),
        param_order=tuple(registration_order(blk, impl.module_order) for blk in kinds),
        buffer_bytes_per_layer=cache if per_layer else 0,
        buffer_bytes_shared=0 if per_layer else cache,
    )


def _layer_kinds(
    spec: ModelSpec, first_grad: bool
) -> tuple[list[tuple[LayerType, bool]], LayerLayout]:
    """The distinct layer kinds -- (layer type, whether its input needs a gradient) -- and
    the layout of the model's layers over them: without an input gradient the first layer is
    a kind of its own."""
    # a layer kind: (its type, whether its input needs a gradient)
    kinds_of = [(t, True) for t in (*spec.first_layers, *spec.layer_pattern)]
    if not first_grad:
        kinds_of.insert(0, (spec.layer_type(0), False))
    types = list(dict.fromkeys(kinds_of))
    index = {t: i for i, t in enumerate(types)}
    head = [index[(t, True)] for t in spec.first_layers]
    if not first_grad:
        head = [index[(spec.layer_type(0), False)], *head[1:]]
    period = [index[(t, True)] for t in spec.layer_pattern]
    if not first_grad and not spec.first_layers:
        # the pattern starts again after the first layer
        period = period[1:] + period[:1]
    layout = LayerLayout.periodic(period, spec.num_layers, head=head)
    return types, layout


def _prologue(
    pro: Scope,
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    setup: TrainingSetup,
    present: list[LayerType],
    shared: dict[str, Saved],
    first_grad: bool,
) -> DType:
    """The ops before the first layer: embeddings, the flex block mask, the rotary tables and
    the tensors every layer's ops save (masks), counted once. Returns the rotary tables'
    dtype."""
    table = DType.fp32 if impl.rotary_tables_fp32 else dims.r
    # (a trained embedding's output already requires grad: the hook makes no leaf of it)
    leaf = setup.embedding_output_requires_grad and not pro.trainable(impl.names["embed_tokens"])
    embeddings(pro, spec, impl, dims, output_grad=first_grad, leaf_output=leaf)
    if setup.attention is Attention.flex:
        _block_mask(pro, dims)
    if spec.positions is Positions.rotary and impl.rotary_tables_saved:
        spans = {t.is_sliding for t in present} if impl.rotary_per_span else {False}
        rotary_tables(
            pro, spec, dims, pairs=len(spans), dtype=table, complex_table=impl.complex_rotary
        )
    if shared:
        pro.add(
            "shared block inputs",
            Component.attention,
            list(shared.values()),
            0,
            "tensors the model makes once and every layer's ops save (masks): counted once",
        )

    return table


def _checkpoint_kept(
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    setup: TrainingSetup,
    present: list[LayerType],
) -> tuple[Saved, ...]:
    """Tensors the model passes to every layer that a checkpoint keeps alive once (masks,
    position ids)."""
    extra: tuple[Saved, ...] = ()
    if setup.attention is Attention.eager:
        # HF materialises a (b, 1, s, s) additive mask (stream dtype) per attention span for
        # eager attention and passes it to every decoder layer; a checkpoint keeps it alive
        # once (GPT-2 passes it positionally, so checkpoint's _NoopSaveInputs saves it;
        # Llama by keyword, so the checkpoint's closure holds it).
        spans = {t.is_sliding for t in present}
        extra = tuple(
            Saved(
                "eager_sliding_mask" if sliding else "eager_causal_mask",
                dims.b * dims.s * dims.s,
                dims.r,
            )
            for sliding in sorted(spans)
        )
    elif setup.attention is Attention.sdpa and any(sliding_mask(spec, dims.s, t) for t in present):
        # SDPA sliding layers get HF's boolean mask: (s, s) expanded to (b, 1, s, s)
        # (sdpa_mask), passed to every sliding layer by keyword and saved by none (SDPA saves
        # its own additive copy), so a checkpoint's closure keeps it. Full layers get None.
        extra = (Saved("sdpa_sliding_mask", dims.s * dims.s, DType.bool),)
    if impl.checkpoint_keeps_position_ids:
        # HF passes position_ids (1 x s, or b x s when built per sequence, int64) to every
        # layer by keyword; no op saves them (RoPE runs under no_grad), so a checkpoint's
        # closure is what keeps them.
        rows = dims.b if impl.position_ids_batched else 1
        extra += (Saved("position_ids", rows * dims.s, DType.int64),)
    return extra


def _span_inputs(
    spec: ModelSpec,
    impl: Implementation,
    dims: Dims,
    types: list[tuple[LayerType, bool]],
    present: list[LayerType],
    extra: tuple[Saved, ...],
    table: DType,
) -> list[SpanInput]:
    """The inputs only one attention span's layers read (its mask and rotary tables)."""
    index = {t: i for i, t in enumerate(types)}
    # Two attention spans: each span's mask and rotary tables are read by its layers only
    # (HF Gemma 2 / 3: causal_mask_mapping[config.layer_types[i]], position_embeddings[...]).
    span_kinds = {
        sliding: frozenset(index[k] for k in types if k[0].is_sliding is sliding)
        for sliding in (False, True)
    }
    spans_present = sorted({t.is_sliding for t in present})
    span_inputs: list[SpanInput] = []
    if len(spans_present) > 1:
        if spec.positions is Positions.rotary and impl.rotary_per_span:
            # rotary_tables: one cos and one sin per span, (1, s, rotary dims)
            pair = 2 * dims.s * spec.rotary_dim * table.itemsize
            span_inputs += [SpanInput(span_kinds[sp], pair, False) for sp in spans_present]
        span_inputs += [
            SpanInput(span_kinds["sliding" in t.name], t.nbytes, True)
            for t in extra
            if t.name.endswith(("_sliding_mask", "_causal_mask"))
        ]
    return span_inputs


def _rotary_cache_bytes(spec: ModelSpec, impl: Implementation, dims: Dims, seq: int) -> int:
    """A rotary cache buffer of ``seq`` positions: complex64 of width d/2 (8 bytes an
    element), or fp32 cos | sin of width 2d."""
    if impl.rotary_cache is RotaryCache.none or spec.positions is not Positions.rotary:
        return 0
    return seq * (dims.d // 2 * 8 if impl.complex_rotary else 2 * dims.d * 4)


def registration_order(blk: Block, module_order: tuple[str, ...]) -> tuple[str, ...]:
    """The block's weight names in ``model.parameters()`` order: each takes the place of the
    first of the family's ``module_order`` prefixes it starts with (forward order among equals,
    and for a family that lists none)."""
    names = [w.name for op in blk.ops for w in op.weights]

    def rank(name: str) -> int:
        return next(
            (j for j, p in enumerate(module_order) if name.startswith(p)), len(module_order)
        )

    return tuple(sorted(names, key=rank)) if module_order else tuple(names)


LOWERINGS = {
    ModelCode.hf: lower_hf,
    ModelCode.ours: lower_hf,
    ModelCode.torchtitan: lower_hf,
    ModelCode.megatron_core: _lower_megatron,
}
"""The lowering of each framework's model code (torchtitan's: HF's with its ``layer_code``
overrides, ``implementation``)."""
