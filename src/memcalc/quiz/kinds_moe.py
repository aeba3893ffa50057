"""Generated questions on mixtures of experts (Shazeer et al. 2017; Fedus et al. 2022): total
against active parameters, and why memory follows the total while compute follows the
active count. Asked only for a model with routed experts (``ModelSpec.moe``).

The counts come from the estimate's parameter tensors: ``ParamCounts.active`` (everything
but the routed experts, plus top_k of the E experts of each MoE layer) and the routed
experts' tensors themselves (``ModelFacts.experts``).
"""

from __future__ import annotations

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
from memcalc.quiz.figures import (
    Sum,
    choose_scale,
    far_apart,
    format_params,
    format_share,
    params_value,
)
from memcalc.quiz.kinds import both, sum_words
from memcalc.quiz.kinds_parallel import STATE_TERMS, model_states
from memcalc.quiz.templates import TEMPLATES
from memcalc.units import format_flops

NAMED_COPIES_MAX = 16
"""Up to this many experts, "E copies of a dense model" is a reading people make of a name
like Mixtral 8x7B; beyond it no one would."""


def _count(n: float, mistake: str = "") -> Choice:
    text = format_params(n)
    return Choice(text, text, value=params_value(text), mistake=mistake)


def _has_shared_experts(f: ModelFacts) -> bool:
    moe = f.spec.moe
    return moe is not None and (moe.shared_experts > 0 or moe.shared_expert_size is not None)


@question_kind(
    "moe-active",
    concept="moe-total-vs-active",
    topic=Topic.moe,
    difficulty=Difficulty.easy,
    variation=Variation.depth,
)
def moe_active(f: ModelFacts) -> Draft | None:
    """Parameters one token uses: all but the routed experts, plus top_k / E of them."""
    e, moe = f.experts, f.spec.moe
    if e is None or moe is None or not e.routed_numel:
        return None
    p = f.base.params
    total, active = p.total, p.active
    experts, k = moe.num_experts, moe.top_k
    shared = total - e.routed_numel
    per_expert = e.routed_numel / experts
    candidates = [_count(total, "moe.total")]
    if experts <= NAMED_COPIES_MAX:
        candidates.append(_count(experts * (shared + per_expert), "moe.e_copies"))
    candidates.append(_count(total * k / experts, "moe.scaled_all"))
    if k > 1:
        candidates.append(_count(shared + per_expert, "moe.top1"))
    candidates.append(_count(e.routed_active_numel, "moe.forgot_shared"))
    tokens = f.setup.tokens
    forward = f.base.forward_flops

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["moe-active"][lang].parts
        return {"shared_note": tpl["shared" if _has_shared_experts(f) else "no_shared"]}

    return Draft(
        _count(active),
        candidates,
        values={
            "total": format_params(total),
            "experts": str(experts),
            "top_k": str(k),
            "moe_layers": str(f.spec.moe_layers),
            "routed": format_params(e.routed_numel),
            "routed_active": format_params(e.routed_active_numel),
            "shared": format_params(shared),
            "forward": format_flops(forward),
            "dense_forward": format_flops(2 * active * tokens),
        },
        lang_values=both(words),
    )


@question_kind(
    "moe-states",
    concept="moe-memory-follows-total",
    topic=Topic.moe,
    difficulty=Difficulty.medium,
    variation=Variation.precision,
)
def moe_states(f: ModelFacts) -> Draft | None:
    """Weights + gradients + optimizer states of an MoE on one GPU: every expert's, whichever
    a token picks (full training only: under LoRA the experts would be frozen)."""
    if f.spec.moe is None or f.fine_tuned:
        return None
    b = f.base
    p = b.params
    if p.active == p.total:
        return None
    value = model_states(b)
    per_param = value / p.total
    dense = p.active * per_param
    w, g, o = b.parameter_bytes, b.gradient_bytes, b.optimizer_bytes
    total = Sum(((1, w), (1, g), (1, o)), value)
    sharded = f.laid_out(dp=DP_RANKS, zero=3)
    scale = choose_scale([value, w, g, o, dense])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (dense, "moe.states_active", {}),
        (w, "moe.weights_only", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["moe-states"][lang].parts
        zero = (
            tpl["zero3"].format(gpus=str(DP_RANKS), z3=size_text(scale, model_states(sharded)))
            if sharded is not None
            else ""
        )
        return {"sum": sum_words(scale, lang, total, STATE_TERMS), "zero_sentence": zero}

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "total": format_params(p.total),
            "active": format_params(p.active),
            "w": size_text(scale, w),
            "g": size_text(scale, g),
            "o": size_text(scale, o),
            "dense": size_text(scale, dense),
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


EP_DEGREES = (8, 4, 2)
"""Expert-parallel sizes the question tries, largest first: the first that divides the
number of experts is asked about, over as many data-parallel GPUs."""


@question_kind(
    "expert-parallel-states",
    concept="expert-parallel-shards-experts",
    topic=Topic.moe,
    difficulty=Difficulty.hard,
)
def expert_parallel_states(f: ModelFacts) -> Draft | None:
    """Model states per GPU with expert parallelism over ep data-parallel GPUs: each keeps
    E / ep of every MoE layer's routed experts and all of the rest (``Sharding.expert_gpus``,
    ``strategies/placement.py``), against plain data parallelism over the same GPUs."""
    moe = f.spec.moe
    if moe is None or f.fine_tuned:
        return None
    ep = next((e for e in EP_DEGREES if moe.num_experts % e == 0), None)
    if ep is None:
        return None
    split, whole = f.laid_out(dp=ep, ep=ep), f.laid_out(dp=ep)
    if split is None or whole is None:
        return None
    value, before = model_states(split), model_states(whole)
    if not far_apart(value, before):
        return None
    experts = f.experts
    routed_share = experts.routed_numel / f.base.params.total if experts else 0.0
    scale = choose_scale([value, before, before / ep, before * routed_share / ep])
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (before, "ep.not_split", {}),
        (before / ep, "ep.all_divided", {}),
        (before * routed_share / ep, "ep.experts_only", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "ep": str(ep),
            "experts": str(moe.num_experts),
            "per_rank": str(moe.num_experts // ep),
            "before": size_text(scale, before),
            "acts_whole": size_text(scale, whole.activation_bytes),
            "acts_split": size_text(scale, split.activation_bytes),
            "routed_share": format_share(routed_share),
            "imbalance": f"{f.setup.moe_imbalance:g}",
        },
        lang_values=both(
            lambda lang: {
                "shared_note": TEMPLATES["moe-active"][lang].parts[
                    "shared" if _has_shared_experts(f) else "no_shared"
                ]
            }
        ),
        numeric=numeric_size(scale, value),
    )
