"""Lower a ModelSpec + TrainingSetup into the op graph of one training step.

The graph is composed from building blocks (``graph/blocks/``), each mirroring one piece of the
real implementation and declaring exactly the tensors autograd saves for it, with their dtype.
The sources are the autograd formulas in PyTorch's ``tools/autograd/derivatives.yaml`` and the
HF modeling files (transformers 5.x); the GPT-2 lowering reproduces the reference measurements
in ``shared/reference`` to the byte. Each distinct layer type is lowered once
(``decoder_block``) and laid out over the stack (``Layout``), so the cost does not grow with
depth.
"""

from __future__ import annotations

from memcalc.errors import MemcalcError
from memcalc.graph.blocks.block import decoder_block
from memcalc.graph.blocks.embedding import embeddings, rotary_tables
from memcalc.graph.blocks.head import head_and_loss
from memcalc.graph.layout import Layout
from memcalc.graph.ops import Block, Component, OpGraph, Saved
from memcalc.graph.scope import Dims, Scope
from memcalc.spec.families import family_of
from memcalc.spec.model import ModelSpec, Positions
from memcalc.spec.training import Attention, DType, Precision, TrainingSetup


def _scope(setup: TrainingSetup) -> Scope:
    """A scope whose linears follow the precision recipe (fp8 saved inputs, autocast casts)."""
    autocast = setup.activation_dtype if setup.precision.is_amp else None
    par = setup.parallel
    return Scope(
        fp8_linears=setup.precision is Precision.fp8_mixed,
        autocast=autocast,
        gathered_inputs=par.dtensor_tp and par.sequence_parallel,
    )


def dims_of(spec: ModelSpec, setup: TrainingSetup, device: str = "cuda") -> Dims:
    """The sizes of one step of ``spec`` under ``setup``."""
    p = setup.activation_dtype
    r = DType.fp32 if setup.precision.is_amp else p
    t = setup.parallel.tp
    return Dims(
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
        stat_dtype=DType.fp32 if (device == "cuda" or r is DType.fp32) else r,
        pow_in_fp32=setup.precision.is_amp and device == "cuda",
        tp=t,
        sp=setup.parallel.sequence_parallel,
    )


def _split(n: int, ranks: int, what: str) -> int:
    """``n`` / ``ranks``, which must divide it (Megatron's rule for heads and MLP width)."""
    if n % ranks:
        raise MemcalcError(f"--tp: {ranks} does not divide {what} ({n})")
    return n // ranks


def lower(spec: ModelSpec, setup: TrainingSetup, *, device: str = "cuda") -> OpGraph:
    """The op graph of one training step of ``spec`` under ``setup``.

    ``device='cpu'`` mirrors the CPU kernels where they store differently (LayerNorm statistics
    in the input dtype), for comparing with CPU measurements.

    Korthikanti et al. 2022 (eq. 1), GPT-2 shape, 16-bit, eager, dropout: ~sbh(34 + 5as/h)
    per block; this lowering is that plus HF's 3 extra GELU tensors (gelu_new) and fp32 stats.
    """
    if setup.dropout is not None:
        spec = spec.with_dropout(setup.dropout)
    impl = family_of(spec).impl
    dims = dims_of(spec, setup, device)

    types = list(dict.fromkeys((*spec.first_layers, *spec.layer_pattern)))
    index = {t: i for i, t in enumerate(types)}
    layout = Layout.periodic(
        [index[t] for t in spec.layer_pattern],
        spec.num_layers,
        head=[index[t] for t in spec.first_layers],
    )
    present = [t for t in types if layout.counts(len(types))[index[t]]]
    kinds: list[Block] = []
    shared: dict[str, Saved] = {}
    for t in types:
        sc = _scope(setup)
        kinds.append(decoder_block(sc, spec, impl, dims, t, setup.attention))
        if t in present:
            shared.update(sc.shared)

    pro = Scope()
    embeddings(pro, spec, impl, dims)
    if spec.positions is Positions.rotary:
        rotary_tables(pro, spec, dims)
    if shared:
        pro.add(
            "shared block inputs",
            Component.attention,
            list(shared.values()),
            0,
            "tensors the model makes once and every layer's ops save (masks): counted once",
        )

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
    if impl.checkpoint_keeps_position_ids:
        # HF passes position_ids (1 x s, int64) to every layer by keyword; no op saves them
        # (RoPE runs under no_grad), so a checkpoint's closure is what keeps them.
        extra += (Saved("position_ids", dims.s, DType.int64),)

    epi = _scope(setup)
    logits, transient = head_and_loss(epi, spec, impl, dims, setup.loss)
    return OpGraph(tuple(pro.ops), tuple(kinds), layout, tuple(epi.ops), extra, logits, transient)
