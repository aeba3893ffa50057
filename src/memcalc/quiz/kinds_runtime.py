"""Generated questions on what one GPU holds besides the four components, and on settings that
change it without changing the model: allocated vs reserved memory (what
``torch.cuda.max_memory_allocated`` and ``nvidia-smi`` show), fp8 training, gradient
accumulation, eager attention's score matrices, and the pinned host RAM an optimizer offload
needs.

Each reads ``estimate`` of the learner's setup or of one variant of it (``ModelFacts.under``);
a variant the estimate refuses (fp8 on a GPU without fp8 tensor cores, a layout the model does
not divide) leaves its question out.
"""

from __future__ import annotations

from memcalc.errors import MemcalcError
from memcalc.estimate import Breakdown, Options
from memcalc.quiz.bank import Difficulty, Lang, Topic
from memcalc.quiz.draft import (
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
from memcalc.quiz.facts import ModelFacts
from memcalc.quiz.figures import Sum, choose_scale, far_apart
from memcalc.quiz.kinds import both, written_sum
from memcalc.quiz.templates import LABELS, TEMPLATES
from memcalc.quiz.words_runtime import FIT_RULES
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import Attention, Precision, TrainingSetup
from memcalc.strategies.offload import Offload

ACCUMULATION_STEPS = 4
"""Micro-batches the gradient-accumulation question accumulates over."""
OFFLOAD_RANKS = 8
"""Data-parallel ranks of one node the pinned-host question spreads ZeRO-Offload over (at
most the profile's GPUs per node)."""


def _setup(f: ModelFacts, **changes: object) -> TrainingSetup | None:
    """The learner's setup with ``changes``, or None when it is not a valid setup."""
    try:
        return f.setup.replace(**changes)
    except MemcalcError:
        return None


def _variant(f: ModelFacts, options: Options | None = None, **changes: object) -> Breakdown | None:
    setup = _setup(f, **changes)
    if setup is None:
        return None
    return f.under(setup, options) if options is not None else f.under(setup)


@question_kind(
    "allocated-vs-reserved",
    concept="allocated-vs-reserved-memory",
    topic=Topic.activations,
    difficulty=Difficulty.easy,
)
def allocated_vs_reserved(f: ModelFacts) -> Draft | None:
    """What ``torch.cuda.max_memory_allocated()`` reports: the live tensors at the step's
    largest moment, the estimate's peak without the runtime overhead (CUDA context and library
    workspaces, which ``nvidia-smi`` shows but the allocator never hands out). The allocator's
    own cache and fragmentation are reserved memory (``allocator``): the explanation gives the
    replayed reserved peak where the layout is replayed, the --headroom reserve where not."""
    b = f.base
    peak, overhead = b.peak_bytes, b.overhead_bytes
    value = b.peak.total_bytes
    if not overhead or value <= 0:
        return None
    difference = Sum(((1, peak), (-1, overhead)), value)
    scale = choose_scale([value, peak, overhead, b.reserve_bytes], [difference])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (peak, "alloc.with_overhead", {}),
        (peak + b.reserve_bytes, "alloc.with_reserve", {}),
        (b.steady_bytes, "alloc.sum", {}),
        (b.usable_bytes, "alloc.usable", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]

    replayed = b.reserved.modelled
    rule = FIT_RULES["replayed" if replayed else "not_replayed"]

    def words(lang: Lang) -> dict[str, str]:
        figures = {
            "usable": size_text(scale, b.usable_bytes, lang),
            "reserve": size_text(scale, b.reserve_bytes, lang),
            "headroom": f"{b.headroom_fraction:.0%}",
            "gpu_memory": size_text(scale, f.gpu.memory_bytes, lang),
        }
        if replayed:
            figures["reserved"] = size_text(scale, b.reserved.reserved_peak_bytes, lang)
            figures["fragmentation"] = size_text(scale, b.reserved.fragmentation_bytes, lang)
        return {
            "difference": written_sum(scale, lang, difference),
            "phase": LABELS[lang].get(f"phase.{b.peak.phase}", b.peak.phase),
            "fit_rule": rule[lang].format(**figures),
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "peak": size_text(scale, peak),
            "overhead": size_text(scale, overhead),
            "reserve": size_text(scale, b.reserve_bytes),
            "usable": size_text(scale, b.usable_bytes),
            "headroom": f"{b.headroom_fraction:.0%}",
            "where": b.peak.where,
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


@question_kind(
    "fp8-activations",
    concept="fp8-saves-linear-inputs",
    topic=Topic.precision,
    difficulty=Difficulty.medium,
    variation=Variation.batch,
)
def fp8_activations(f: ModelFacts) -> Draft | None:
    """Activations under fp8-mixed (Transformer Engine style: the linear layers' inputs saved
    for backward as fp8 e4m3 copies) against bf16-mixed: only those inputs shrink, to 1 byte;
    the model states do not change. Asked for full training under bf16-mixed or fp8-mixed, on
    a GPU whose profile has fp8 tensor cores (the estimate refuses fp8 elsewhere)."""
    if f.fine_tuned or f.setup.precision not in (Precision.bf16_mixed, Precision.fp8_mixed):
        return None
    bf16 = _variant(f, precision=Precision.bf16_mixed)
    fp8 = _variant(f, precision=Precision.fp8_mixed)
    if bf16 is None or fp8 is None:
        return None
    value, before = fp8.activation_bytes, bf16.activation_bytes
    if not far_apart(value, before):
        return None
    states = bf16.parameter_bytes + bf16.gradient_bytes + bf16.optimizer_bytes
    saving = Sum(((1, before), (-1, value)), before - value)
    scale = choose_scale([value, before, before - value], [saving])
    large = choose_scale([states, bf16.peak_bytes, fp8.peak_bytes])
    same_peak = size_text(large, bf16.peak_bytes) == size_text(large, fp8.peak_bytes)

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["fp8-activations"][lang].parts
        phase = LABELS[lang].get(f"phase.{fp8.peak.phase}", fp8.peak.phase)
        fill = {
            "bf16_peak": size_text(large, bf16.peak_bytes, lang),
            "fp8_peak": size_text(large, fp8.peak_bytes, lang),
            "phase": phase,
        }
        return {
            "saving": written_sum(scale, lang, saving),
            "peak_sentence": tpl["peak_same" if same_peak else "peak_lower"].format(**fill),
        }

    candidates: list[tuple[float, str, dict[str, str]]] = [
        (before / 2, "fp8.all_halved", {}),
        (before, "fp8.unchanged", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "bf16_acts": size_text(scale, before),
            "states": size_text(large, states),
            "bf16_peak": size_text(large, bf16.peak_bytes),
            "fp8_peak": size_text(large, fp8.peak_bytes),
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


@question_kind(
    "grad-accumulation",
    concept="gradient-accumulation-peak",
    topic=Topic.activations,
    difficulty=Difficulty.medium,
)
def grad_accumulation(f: ModelFacts) -> Draft | None:
    """The step's peak with gradient accumulation over ``ACCUMULATION_STEPS`` micro-batches of
    the learner's batch, against one micro-batch that many times larger: each micro-batch's
    activations are freed by its own backward, the gradients accumulate in place."""
    n = ACCUMULATION_STEPS
    if f.setup.parallel != Parallelism():
        return None
    accum = _variant(f, parallel=Parallelism(microbatches=n))
    big = _variant(f, batch=n * f.setup.batch)
    if accum is None or big is None:
        return None
    value = accum.peak_bytes
    scale = choose_scale([value, big.peak_bytes, accum.activation_bytes, big.activation_bytes])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (big.peak_bytes, "accum.whole_batch", {}),
        (value + (n - 1) * accum.activation_bytes, "accum.all_micro_acts", {}),
        (value + (n - 1) * accum.gradient_bytes, "accum.grads_per_micro", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    same = not far_apart(value, big.peak_bytes)

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["grad-accumulation"][lang].parts
        phase = LABELS[lang].get(f"phase.{accum.peak.phase}", accum.peak.phase)
        return {"peak_sentence": tpl["same" if same else "lower"].format(phase=phase)}

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "steps": str(n),
            "big_batch": str(n * f.setup.batch),
            "acts": size_text(scale, accum.activation_bytes),
            "big_acts": size_text(scale, big.activation_bytes),
            "big_peak": size_text(scale, big.peak_bytes),
            "grads_b": size_text(scale, accum.gradient_bytes),
            "where": accum.peak.where,
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


@question_kind(
    "eager-attention-cost",
    concept="eager-attention-keeps-scores",
    topic=Topic.attention,
    difficulty=Difficulty.hard,
)
def eager_attention_cost(f: ModelFacts) -> Draft | None:
    """Activation bytes eager attention keeps beyond SDPA's for the learner's model: the
    b x heads x s x s scores of every layer (the softmax's fp32 output and the 16-bit
    probabilities the matmul with V saves, read from the two estimates), which a fused kernel
    never stores. Left out when the model has no SDPA path or the two are equal."""
    eager = _variant(f, attention=Attention.eager)
    sdpa = _variant(f, attention=Attention.sdpa)
    if eager is None or sdpa is None or f.spec.mla is not None:
        return None
    value = eager.activation_bytes - sdpa.activation_bytes
    if value <= 0:
        return None
    spec, setup = f.spec, f.setup
    layers, heads = spec.num_layers, spec.num_heads
    kv_heads = spec.num_kv_heads or heads
    scores = layers * setup.batch * heads * setup.seq * setup.seq
    per_score = value / scores
    scale = choose_scale([value, value / layers])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (value / layers, "attn.one_layer", {}),
    ]
    if kv_heads < heads:
        candidates.append((value * kv_heads / heads, "attn.kv_heads", {}))
    candidates += [
        (2 * scores, "attn.one_bf16_copy", {}),
        (eager.activation_bytes, "attn.eager_total", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    dropout = setup.dropout if setup.dropout is not None else spec.attention_dropout

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["eager-attention-cost"][lang].parts
        return {"stored": tpl["stored"].format(dropout=tpl["dropout"] if dropout else "")}

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "heads": str(heads),
            "kv_heads": str(kv_heads),
            "scores": f"{scores:,}",
            "per_score": f"{per_score:.1f}",
            "eager_acts": size_text(scale, eager.activation_bytes),
            "sdpa_acts": size_text(scale, sdpa.activation_bytes),
            "layer": size_text(scale, value / layers),
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


@question_kind(
    "offload-pinned-host",
    concept="offload-pinned-host-memory",
    topic=Topic.offload,
    difficulty=Difficulty.medium,
    variation=Variation.optimizer,
)
def offload_pinned_host(f: ModelFacts) -> Draft | None:
    """Host RAM one node pins for ZeRO-Offload: each of its ranks moves its shard of the
    optimizer states and fp32 master weights to the host, with a host copy of its gradient
    shard (``strategies/placement.py``); the node holds all of its ranks' shards."""
    if f.fine_tuned or f.setup.parallel != Parallelism():
        return None
    ranks = min(OFFLOAD_RANKS, f.gpu.gpus_per_node)
    if ranks < 2:
        return None
    offload = Options(offload=(Offload.parse("optimizer=cpu"),))
    layout = Parallelism(dp=ranks, zero=2)
    b = _variant(f, offload, parallel=layout)
    kept = _variant(f, parallel=layout)
    single = f.under(f.setup, offload)
    if b is None or kept is None or single is None or not b.host_bytes:
        return None
    value = b.host_bytes_per_node
    opt_rank = kept.optimizer_bytes
    grads_rank = b.host_bytes - opt_rank
    per_rank = Sum(((1, opt_rank), (1, grads_rank)), b.host_bytes)
    scale = choose_scale([value, b.host_bytes, opt_rank, grads_rank], [per_rank])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (b.host_bytes, "host.one_rank", {}),
        (ranks * single.host_bytes, "host.unsharded", {}),
        (ranks * opt_rank, "host.forgot_grads", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    per_param = value / f.base.params.total
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "ranks": str(ranks),
            "opt_rank": size_text(scale, opt_rank),
            "grads_rank": size_text(scale, grads_rank),
            "rank_host": size_text(scale, b.host_bytes),
            "per_param": f"{per_param:.0f}"
            if abs(per_param - round(per_param)) < 1e-6
            else f"{per_param:.2f}",
            "host_memory": size_text(
                choose_scale([b.host_memory_per_node]), b.host_memory_per_node
            ),
        },
        lang_values=both(lambda lang: {"per_rank": written_sum(scale, lang, per_rank)}),
        numeric=numeric_size(scale, value),
    )
