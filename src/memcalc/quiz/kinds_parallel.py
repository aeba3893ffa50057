"""Generated questions on spreading one training step over several GPUs: tensor and sequence
parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022), ZeRO (Rajbhandari et al. 2020),
the 1F1B pipeline (Narayanan et al. 2021) and context parallelism (ring attention).

Each is the learner's model and setup laid out by ``ModelFacts.laid_out`` and read from
``estimate`` of that layout (the most loaded rank; every pipeline stage's breakdown); a layout
the estimate refuses for this model (tp not dividing the heads, a sequence cp does not divide,
eager attention under cp) leaves its question out.
"""

from __future__ import annotations

from memcalc.estimate import Breakdown
from memcalc.graph.lower import lower_cached
from memcalc.quiz.bank import Difficulty, Lang, Topic
from memcalc.quiz.draft import (
    Choice,
    Draft,
    Variation,
    gb_read_as_gib,
    gb_text,
    numeric_size,
    question_kind,
    readable_sizes,
    size,
    size_fallbacks,
    size_text,
)
from memcalc.quiz.facts import DP_RANKS, ModelFacts
from memcalc.quiz.figures import Scale, Sum, choose_scale, format_share, share_value
from memcalc.quiz.kinds import both, sum_words, written_sum
from memcalc.quiz.templates import LABELS, TEMPLATES
from memcalc.spec.parallel import Parallelism
from memcalc.strategies.pipeline import in_flight, layer_split
from memcalc.units import format_seconds

STATE_TERMS = ["term.parameters", "term.gradients", "term.optimizer"]
"""How a sum of weights + gradients + optimizer states names its terms when listed."""


def model_states(b: Breakdown) -> int:
    """Weights + gradients + optimizer states on one GPU."""
    return b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes


@question_kind(
    "tp-activations",
    concept="tensor-parallel-activations",
    topic=Topic.parallel,
    difficulty=Difficulty.hard,
)
def tp_activations(f: ModelFacts) -> Draft | None:
    """Activations per GPU under tensor parallelism without sequence parallelism: the
    attention and MLP tensors divide by t, the norms' inputs, dropout masks and the residual
    stream do not (Korthikanti et al. 2022, sbh(10 + 24/t + 5as/(ht))). The one-GPU figure
    runs the same model code as the tensor-parallel ones (the framework a tp layout runs:
    Megatron-core's by default), so only the split differs."""
    t = f.tp_degree
    if t is None:
        return None
    no_sp, sp = f.laid_out(tp=t, sp=False), f.laid_out(tp=t)
    assert no_sp is not None and sp is not None
    base = f.under(f.setup.replace(framework=no_sp.setup.framework_def.name))
    if base is None:
        return None
    value = no_sp.activation_bytes
    scale = choose_scale([value, sp.activation_bytes, base.activation_bytes])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (sp.activation_bytes, "tp.with_sp", {}),
        (base.activation_bytes / t, "tp.all_divided", {}),
        (base.activation_bytes, "tp.not_divided", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    weights = choose_scale([base.parameter_bytes, no_sp.parameter_bytes])
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "t": str(t),
            "base_acts": size_text(scale, base.activation_bytes),
            "sp_acts": size_text(scale, sp.activation_bytes),
            "w_base": size_text(weights, base.parameter_bytes),
            "w_tp": size_text(weights, no_sp.parameter_bytes),
        },
        numeric=numeric_size(scale, value),
    )


ZERO_STAGE = 2
"""The stage the ZeRO question asks about (the others are its distractors)."""


@question_kind(
    "zero-model-states",
    concept="zero-stages-what-shards",
    topic=Topic.sharding,
    difficulty=Difficulty.medium,
    variation=Variation.optimizer,
)
def zero_model_states(f: ModelFacts) -> Draft | None:
    """Weights + gradients + optimizer states per GPU with ZeRO-2 over ``DP_RANKS`` GPUs;
    ZeRO-1, ZeRO-3 and no sharding are the distractors, tensor parallelism over as many
    GPUs the comparison the explanation draws."""
    stages = {z: f.laid_out(dp=DP_RANKS, zero=z) for z in range(4)}
    if any(b is None for b in stages.values()):
        return None
    states = {z: model_states(b) for z, b in stages.items() if b is not None}
    chosen = stages[ZERO_STAGE]
    assert chosen is not None
    value = states[ZERO_STAGE]
    w, g, o = chosen.parameter_bytes, chosen.gradient_bytes, chosen.optimizer_bytes
    total = Sum(((1, w), (1, g), (1, o)), value)
    tp = f.laid_out(tp=DP_RANKS) if f.tp_degree == DP_RANKS else None
    scale = choose_scale([value, w, g, o, *states.values()] + ([model_states(tp)] if tp else []))
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (states[1], "zero.stage1", {}),
        (states[3], "zero.stage3", {}),
        (states[0], "zero.none", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    shown = {f"z{z}": size_text(scale, s) for z, s in states.items()}
    shown |= {"w": size_text(scale, w), "g": size_text(scale, g), "o": size_text(scale, o)}
    shown |= {"gpus": str(DP_RANKS), "stage": str(ZERO_STAGE)}

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["zero-model-states"][lang].parts
        sentence = ""
        if tp is not None:
            sentence = tpl["tp"].format(
                gpus=str(DP_RANKS),
                tp_states=size_text(scale, model_states(tp), lang),
                dp_acts=size_text(scale, chosen.activation_bytes, lang),
                tp_acts=size_text(scale, tp.activation_bytes, lang),
            )
        return {"sum": sum_words(scale, lang, total, STATE_TERMS), "tp_sentence": sentence}

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values=shown,
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


def pipeline_shape(f: ModelFacts) -> tuple[int, int] | None:
    """(p, m) the pipeline questions ask about: 4 stages and 8 micro-batches, 2 and 4 for a
    model of fewer than 8 blocks; None for a single block."""
    n = f.spec.num_layers
    p = 4 if n >= 8 else 2 if n >= 2 else 0
    return (p, 2 * p) if p else None


@question_kind(
    "pp-first-stage",
    concept="pipeline-1f1b-in-flight",
    topic=Topic.parallel,
    difficulty=Difficulty.medium,
    variation=Variation.depth,
)
def pp_first_stage(f: ModelFacts) -> Draft | None:
    """Activations the first stage holds at its first backward under 1F1B: min(p, m) = p
    micro-batches of its own layers (Korthikanti et al. 2022, sec. 4.2.3), about what the
    whole model keeps for one micro-batch."""
    shape = pipeline_shape(f)
    if shape is None:
        return None
    p, m = shape
    b = f.laid_out(pp=p, microbatches=m)
    if b is None or len(b.stages) != p:
        return None
    first, last = b.stages[0], b.stages[-1]
    held, _ = in_flight(0, Parallelism(pp=p, microbatches=m))
    value = first.activation_bytes
    if value % held:
        return None
    one = value // held
    product = Sum(((held, one),), value)
    scale = choose_scale([value, one, f.base.activation_bytes, last.activation_bytes])
    more = Scale(scale.unit, scale.digits + 1)  # one digit more, if the product then holds
    if not scale.holds(product) and more.holds(product):
        scale = more
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (one, "pp.one_micro", {}),
        (m * one, "pp.all_micro", {}),
        (f.base.activation_bytes / p, "pp.split_layers", {}),
        ((held - 1) * one, "pp.off_by_one", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "p": str(p),
            "m": str(m),
            "held": str(held),
            "stage_layers": str(layer_split(f.spec.num_layers, p)[0][1]),
            "one": size_text(scale, one),
            "base_acts": size_text(scale, f.base.activation_bytes),
            "last_acts": size_text(scale, last.activation_bytes),
        },
        lang_values=both(
            lambda lang: {
                "product": written_sum(scale, lang, product)
                if scale.holds(product)
                else f"{held} × {size_text(scale, one, lang)} ≈ {size_text(scale, value, lang)}"
            }
        ),
        numeric=numeric_size(scale, value),
    )


def _bubble(b: Breakdown) -> float:
    """The bubble's share of the busy and idle time of the slowest stage."""
    t = b.time
    assert t is not None
    return t.bubble_seconds / (t.compute_seconds + t.recompute_seconds + t.bubble_seconds)


def _share(fraction: float, mistake: str = "") -> Choice:
    text = format_share(fraction)
    return Choice(text, text, value=share_value(text), mistake=mistake)


@question_kind(
    "pp-bubble",
    concept="pipeline-bubble",
    topic=Topic.parallel,
    difficulty=Difficulty.easy,
    variation=Variation.depth,
)
def pp_bubble(f: ModelFacts) -> Draft | None:
    """The pipeline bubble's share of a 1F1B step: (p - 1) / (m + p - 1), read from the
    estimate's step time (bubble, compute and recompute of the slowest stage)."""
    shape = pipeline_shape(f)
    if shape is None:
        return None
    p, m = shape
    b, more = f.laid_out(pp=p, microbatches=m), f.laid_out(pp=p, microbatches=2 * m)
    if b is None or more is None or b.time is None:
        return None
    value = _bubble(b)
    candidates = [
        _share((p - 1) / m, "pp.bubble_over_compute"),
        _share((m - 1) / (m + p - 1), "pp.swapped"),
        _share((p - 1) / p, "pp.single_micro"),
        _share(0.0, "pp.no_bubble"),
        _share(1 / p, "pp.one_stage"),
    ]
    t = b.time
    assert t is not None
    return Draft(
        _share(value),
        candidates,
        values={
            "p": str(p),
            "m": str(m),
            "p1": str(p - 1),
            "mp1": str(m + p - 1),
            "m2": str(2 * m),
            "more": format_share(_bubble(more)),
            "bubble_time": format_seconds(t.bubble_seconds),
            "busy_time": format_seconds(t.compute_seconds + t.recompute_seconds),
        },
    )


def context_degree(f: ModelFacts) -> int | None:
    """The cp the context-parallel question asks about: 4, or 2 when 4 does not divide the
    sequence; None when neither does."""
    seq = f.setup.seq
    return next((cp for cp in (4, 2) if seq % cp == 0), None)


@question_kind(
    "cp-per-rank",
    concept="context-parallel-splits-sequence",
    topic=Topic.parallel,
    difficulty=Difficulty.medium,
    variation=Variation.batch,
)
def cp_per_rank(f: ModelFacts) -> Draft | None:
    """What one rank holds under context parallelism: activations of seq / cp tokens, and
    all of the model states (cp does not shard the model)."""
    cp = context_degree(f)
    c = None if cp is None else f.laid_out(cp=cp)
    if c is None or cp is None:
        return None
    base = f.base
    acts_b, acts_c = base.activation_bytes, c.activation_bytes
    states_b, states_c = model_states(base), model_states(c)
    scale = choose_scale([acts_b, acts_c, states_b, states_c, states_c / cp])

    def pair(acts: float, states: float, mistake: str = "") -> Choice:
        en, ur = (
            LABELS[lang]["cp_pair"].format(
                acts=size_text(scale, acts, lang), states=size_text(scale, states, lang)
            )
            for lang in Lang
        )
        return Choice(en, ur, mistake=mistake)

    return Draft(
        pair(acts_c, states_c),
        [
            pair(acts_c, states_c / cp, "cp.states_split"),
            pair(acts_b, states_c, "cp.acts_whole"),
            pair(acts_b, states_b / cp, "cp.backwards"),
        ],
        values={
            "cp": str(cp),
            "local": str(f.setup.seq // cp),
            "acts_b": size_text(scale, acts_b),
            "acts_c": size_text(scale, acts_c),
            "states_c": size_text(scale, states_c),
        },
    )


FSDP_RANKS = 8
"""Data-parallel GPUs the ZeRO-3 / FSDP question shards over (one node)."""


def _block_bytes(f: ModelFacts, setup_weight_itemsize: int) -> tuple[int, int]:
    """(bytes of one block's weights, bytes of FSDP2's root group: everything outside the
    blocks -- embedding, final norm, LM head), from the op graph's block kinds."""
    graph = lower_cached(f.spec, f.setup.replace(dropout=None))
    blocks = sum(k.param_numel * c for k, c in zip(graph.kinds, graph.kind_counts, strict=True))
    root = f.base.params.total - blocks
    return graph.kinds[0].param_numel * setup_weight_itemsize, root * setup_weight_itemsize


@question_kind(
    "fsdp-gathered-weights",
    concept="fsdp-all-gather-buffers",
    topic=Topic.sharding,
    difficulty=Difficulty.hard,
)
def fsdp_gathered_weights(f: ModelFacts) -> Draft | None:
    """Weights on one GPU at the step's peak under ZeRO-3 / FSDP2: its 1/N shard of every
    weight plus the full weights all-gathered at that moment -- the root group's (kept from
    the forward to the end of backward) and the running block's, with the next block's
    prefetched in backward (``timeline.py``, FSDP2). Left out when nothing is gathered at the
    peak (a peak in the optimizer step) or the layout is refused."""
    if f.fine_tuned:
        return None
    b = f.laid_out(dp=FSDP_RANKS, zero=3)
    if b is None or len(set(k.param_numel for k in lower_cached(f.spec, f.setup).kinds)) != 1:
        return None
    shard = b.parameter_bytes + b.buffer_bytes
    value = b.peak.parameter_bytes
    gathered = value - shard
    if gathered <= 0:
        return None
    block, root = _block_bytes(f, f.setup.weight_dtype.itemsize)
    blocks = gathered - root
    if block <= 0 or blocks < 0 or blocks % block:
        return None
    held = blocks // block
    total = Sum(((1, shard), (1, root), (held, block)), value)
    scale = choose_scale([value, shard, root, block, f.base.parameter_bytes], [total])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (shard, "fsdp.shard_only", {}),
        (shard + block, "fsdp.one_block", {}),
        (f.base.parameter_bytes, "fsdp.unsharded", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["fsdp-gathered-weights"][lang].parts
        grads = "grads" if b.peak.gradient_bytes else "no_grads"
        return {
            "sum": sum_words(scale, lang, total, ["fsdp.shard", "fsdp.root", "fsdp.blocks"]),
            "blocks_sentence": tpl["two" if held == 2 else "one"],
            "grads_sentence": tpl[grads].format(
                peak_grads=size_text(scale, b.peak.gradient_bytes, lang),
                grads_shard=size_text(scale, b.gradient_bytes, lang),
            ),
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "gpus": str(FSDP_RANKS),
            "shard": size_text(scale, shard),
            "root": size_text(scale, root),
            "block": size_text(scale, block),
            "full": size_text(scale, f.base.parameter_bytes),
            "peak_grads": size_text(scale, b.peak.gradient_bytes),
            "grads_shard": size_text(scale, b.gradient_bytes),
            "where": b.peak.where,
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


VIRTUAL_STAGES = 2
"""Virtual stages per GPU the interleaved-pipeline question asks about (v)."""


@question_kind(
    "interleaved-pipeline",
    concept="interleaved-pipeline-tradeoff",
    topic=Topic.parallel,
    difficulty=Difficulty.hard,
    variation=Variation.depth,
)
def interleaved_pipeline(f: ModelFacts) -> Draft | None:
    """The first stage's activations at its first backward under interleaved 1F1B (v virtual
    stages per GPU): Megatron's penalty 1 + (p - 1) / (p v) on its p micro-batches
    (``strategies/pipeline.in_flight``), against plain 1F1B; the bubble shrinks by v."""
    shape = pipeline_shape(f)
    if shape is None:
        return None
    p, m = shape
    v = VIRTUAL_STAGES
    if f.spec.num_layers < p * v:
        return None
    plain = f.laid_out(pp=p, microbatches=m)
    inter = f.laid_out(pp=p, microbatches=m, vpp=v)
    if plain is None or inter is None or plain.time is None or inter.time is None:
        return None
    if len(plain.stages) != p or len(inter.stages) != p:
        return None
    value, before = inter.stages[0].activation_bytes, plain.stages[0].activation_bytes
    held, _ = in_flight(0, Parallelism(pp=p, microbatches=m, vpp=v))
    plain_held, _ = in_flight(0, Parallelism(pp=p, microbatches=m))
    scale = choose_scale([value, before, before / v, before * v])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (before, "ilv.same", {}),
        (before / v, "ilv.divided", {}),
        (before * v, "ilv.times_v", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "p": str(p),
            "m": str(m),
            "v": str(v),
            "p1": str(p - 1),
            "pv": str(p * v),
            "held": str(held),
            "plain_held": str(plain_held),
            "before": size_text(scale, before),
            "bubble_plain": format_share(_bubble(plain)),
            "bubble_inter": format_share(_bubble(inter)),
        },
        numeric=numeric_size(scale, value),
    )
