"""One function per generated question kind: the correct option from the Breakdown, the
distractors as the mistakes people make (each naming its mistake), the numbers the
explanation shows, printed at one scale per question so every written sum adds up.

To add a kind: write one function with ``@question_kind(...)`` -- here for one GPU and full
training, in ``kinds_finetune.py`` (LoRA, QLoRA), ``kinds_parallel.py`` (tensor, pipeline,
context parallelism, ZeRO) or ``kinds_moe.py`` (mixture of experts) -- and add its words to
``templates.py`` (``TEMPLATES[name]`` and the ``MISTAKES`` its distractors name).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from memcalc.estimate import Breakdown
from memcalc.plan import added_seconds, cheapest_fit
from memcalc.quiz.bank import AnswerUnit, Difficulty, Lang, Numeric, Topic
from memcalc.quiz.draft import (
    PERCENT_TOLERANCE,
    Choice,
    Draft,
    Variation,
    gb_read_as_gib,
    gb_text,
    in_units_of,
    label,
    numeric_size,
    pick_options,
    question_kind,
    readable_sizes,
    size,
    size_fallbacks,
    size_text,
)
from memcalc.quiz.facts import ModelFacts
from memcalc.quiz.figures import (
    Scale,
    Sum,
    choose_scale,
    far_apart,
    format_count,
    format_percent,
    nice_scale,
    relative_gap,
)
from memcalc.quiz.templates import LABELS, TEMPLATES, strategy_label, strategy_phrase
from memcalc.spec.training import DType, OptimizerKind
from memcalc.strategies.recompute import Recompute
from memcalc.units import format_flops, format_seconds

ADAM_LIKE = (OptimizerKind.adam, OptimizerKind.adamw)


def written_sum(scale: Scale, lang: Lang, s: Sum, names: list[str] | None = None) -> str:
    """A sum as an explanation writes it, e.g. ``32 × 8 MiB + 160 MiB = 416 MiB``; terms of
    zero bytes are left out (they change nothing)."""
    parts: list[str] = []
    for i, (m, t) in enumerate(s.terms):
        if t == 0:
            continue
        name = f"{names[i]} " if names else ""
        text = f"{name}{size_text(scale, t, lang)}"
        if abs(m) != 1:
            text = f"{abs(m)} × {text}"
        sign = "−" if m < 0 else "+"
        parts.append(text if not parts and m > 0 else f"{sign} {text}")
    return f"{' '.join(parts)} = {size_text(scale, s.total, lang)}"


def sum_words(scale: Scale, lang: Lang, s: Sum, names: list[str]) -> str:
    """``s`` written out when it holds at ``scale`` as printed (``written_sum``), else its
    named terms, each rounded, and the total: a sum is never written that does not add up.
    ``names`` are ``LABELS`` keys, one per term."""
    if scale.holds(s):
        return written_sum(scale, lang, s)
    words = LABELS[lang]
    return words["moment_list"].format(
        items=words["list_sep"].join(
            f"{words[n]} {size_text(scale, t, lang)}"
            for n, (_, t) in zip(names, s.terms, strict=True)
            if t
        ),
        sum=size_text(scale, s.total, lang),
    )


def both(make: Callable[[Lang], dict[str, str]]) -> dict[Lang, dict[str, str]]:
    """``{lang: make(lang)}`` for both languages (``make`` returns a dict of words)."""
    return {lang: make(lang) for lang in Lang}


# --- parameters, optimizer, precision ------------------------------------------------------


@question_kind(
    "weights",
    concept="weights-bytes-per-dtype",
    topic=Topic.parameters,
    difficulty=Difficulty.easy,
    variation=Variation.precision,
)
def weights(f: ModelFacts) -> Draft | None:
    """Bytes of the weights: parameters x bytes of the weight dtype (full training only:
    LoRA adapters and quantized weights have bytes of their own, asked by the LoRA kinds; not
    asked where some weights keep a dtype of their own -- DeepSeek's fp32 router in a 16-bit
    model -- and the product is not the answer)."""
    if f.fine_tuned:
        return None
    b, setup = f.base, f.setup
    p, w = b.params.total, setup.weight_dtype.itemsize
    if b.parameter_bytes != p * w:
        return None
    other = DType.bf16 if w == 4 else DType.fp32
    value = b.parameter_bytes
    states = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes
    scale = choose_scale([value, b.gradient_bytes, b.optimizer_bytes])
    candidates = [
        (p * other.itemsize, "weights.other_dtype", {"other": other.value}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        (states, "weights.all_states", {}),
        *size_fallbacks(value),
    ]
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "weight_bytes": str(w),
            "value_bytes": f"{value:,}",
            "value_gb": gb_text(value),
            "grads": size_text(scale, b.gradient_bytes),
            "optimizer_b": size_text(scale, b.optimizer_bytes),
        },
        numeric=numeric_size(scale, value),
    )


def _state_sentence_key(kind: OptimizerKind) -> str:
    return {
        OptimizerKind.sgd: "states.none",
        OptimizerKind.sgd_momentum: "states.one",
        OptimizerKind.lion: "states.lion",
        OptimizerKind.adam: "states.two",
        OptimizerKind.adamw: "states.two",
        OptimizerKind.adamw_8bit: "states.eight_bit",
        OptimizerKind.adafactor: "states.factored",
    }[kind]


@question_kind(
    "optimizer-states",
    concept="optimizer-state-count",
    topic=Topic.optimizer,
    difficulty=Difficulty.easy,
    variation=Variation.optimizer,
)
def optimizer_states(f: ModelFacts) -> Draft | None:
    """GPU bytes the optimizer holds between steps: states + fp32 master weights (+ the step
    counters only when the estimate puts them on the GPU). Left out for plain SGD without
    master weights, which holds nothing (bytes-per-param asks about it), and under LoRA
    (``lora-states`` asks about the adapters' states)."""
    if f.fine_tuned:
        return None
    b, setup = f.base, f.setup
    detail, p = b.optimizer_detail, b.params.total
    value = b.optimizer_bytes
    if value == 0:
        return None
    step = detail.step_tensor_bytes
    on_gpu_step = value - detail.state_bytes - detail.master_weight_bytes
    if step == 0:
        step_key = "step.none"
    elif on_gpu_step == step:
        step_key = "step.counted"
    else:
        step_key = "step.host"
    shown = [(1, detail.state_bytes), (1, detail.master_weight_bytes)]
    scale = choose_scale([value, detail.state_bytes], [Sum(tuple(shown), value - on_gpu_step)])
    opt_size = setup.optimizer_dtype.itemsize
    candidates: list[tuple[float, str, dict[str, str]]] = []
    if detail.master_weight_bytes:
        candidates.append((value - detail.master_weight_bytes, "optimizer.forgot_master", {}))
        w = setup.weight_dtype.itemsize
        states_16 = detail.state_bytes // opt_size * w + detail.master_weight_bytes + on_gpu_step
        if setup.optimizer in ADAM_LIKE:
            candidates.append((states_16, "optimizer.states_16bit", {}))
    if setup.optimizer in ADAM_LIKE:
        candidates.append((value - detail.state_bytes / 2, "optimizer.one_state", {}))
    else:
        adam = 2 * p * opt_size + detail.master_weight_bytes
        candidates.append((adam, "optimizer.adam_states", {}))
    candidates += [
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        (b.parameter_bytes + b.gradient_bytes + value, "optimizer.all_states", {}),
    ]
    candidates += size_fallbacks(value)
    master_key = "master.none"
    if setup.precision.is_mixed:
        master_key = "master.mixed" if detail.state_bytes else "master.mixed_only"
    values = {
        "states": size_text(scale, detail.state_bytes),
        "master": size_text(scale, detail.master_weight_bytes),
        # the parameters with a master copy: all but those already fp32 (DeepSeek's router)
        "master_params": f"{detail.master_weight_bytes // 4:,}",
        "no_master": size_text(scale, value - detail.master_weight_bytes),
        "step_bytes": f"{step:,}",
        "state_dtype": setup.optimizer_dtype.value,
        "value_wo_step": size_text(scale, value - on_gpu_step),
    }
    parts = TEMPLATES["optimizer-states"]

    def words(lang: Lang) -> dict[str, str]:
        fill = {"precision": setup.precision.value, "optimizer": setup.optimizer.value}
        fill |= {"params": f"{p:,}"} | values
        fill |= {"states": size_text(scale, detail.state_bytes, lang)}
        return {
            key: parts[lang].parts[part].format(**fill)
            for key, part in (
                ("state_sentence", _state_sentence_key(setup.optimizer)),
                ("master_sentence", master_key),
                ("step_sentence", step_key),
            )
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values=values,
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


STATES_IN_RECIPE_DTYPE = (
    OptimizerKind.sgd_momentum,
    OptimizerKind.lion,
    OptimizerKind.adam,
    OptimizerKind.adamw,
)
"""Optimizers whose states are stored in the recipe's optimizer dtype (``optimizer.py``); the
8-bit states and Adafactor's factored moment keep their own sizes under every recipe."""


def _recipe(f: ModelFacts) -> str:
    """Which sentence says what else the recipe stores per parameter."""
    precision = f.setup.precision
    if precision.is_mixed:
        return "mixed"
    if precision.is_amp:
        return "amp"
    return "fp32" if precision.value == "fp32" else "pure16"


def bytes_text(x: float) -> str:
    """Bytes per parameter as an explanation writes them: whole numbers bare, fractions with
    two decimals, tiny fractions (Adafactor's factored moment) with two significant digits.

    >>> bytes_text(8.0), bytes_text(2.0039), bytes_text(0.00171)
    ('8', '2.00', '0.0017')
    """
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def _bpp_words(f: ModelFacts, states: float, master: float) -> dict[Lang, dict[str, str]]:
    """The sentences of the bytes-per-parameter explanation: what the optimizer's share is
    made of for this optimizer and recipe (every figure from the optimizer's own bytes), and
    the published counts only where they are this recipe's (Adam-type, mixed precision)."""
    setup = f.setup
    adam_mixed = setup.optimizer in ADAM_LIKE and setup.precision.is_mixed
    parts = TEMPLATES["bytes-per-param"]
    fill = {
        "s": bytes_text(states),
        "state_dtype": setup.optimizer_dtype.value,
        "optimizer": setup.optimizer.value,
        "weight_dtype": setup.weight_dtype.value,
        "precision": setup.precision.value,
    }

    def words(lang: Lang) -> dict[str, str]:
        tpl = parts[lang].parts
        share = tpl[f"states.{setup.optimizer.value}"].format(**fill)
        if master:
            share = tpl["with_master_share"].format(states=share)
        return {
            "optimizer_sentence": tpl["share"].format(share=share),
            "recipe_sentence": tpl[_recipe(f)].format(**fill),
            "reference_sentence": tpl["counts"] if adam_mixed else "",
            "prompt_states": tpl["with_master" if setup.precision.is_mixed else "no_master"],
        }

    return both(words)


@question_kind(
    "bytes-per-param",
    concept="bytes-per-param-mixed-precision-adamw",
    topic=Topic.precision,
    difficulty=Difficulty.medium,
    variation=Variation.precision,
)
def bytes_per_param(f: ModelFacts) -> Draft | None:
    """Weights + gradients + optimizer states (+ master weights) per parameter; full
    training only (under LoRA most parameters have no gradient or state). Every distractor
    is a count someone makes for this optimizer and recipe; the published counts (Megatron's
    18 and 20, the ZeRO paper's 16) are named only for Adam-type optimizers under mixed
    precision, the recipes they count."""
    if f.fine_tuned:
        return None
    b, setup = f.base, f.setup
    p = b.params.total
    w, g = setup.weight_dtype.itemsize, setup.gradient_dtype.itemsize
    detail = b.optimizer_detail
    master = detail.master_weight_bytes / p
    states = detail.state_bytes / p
    o = states + master
    n = w + g + o
    adam = setup.optimizer in ADAM_LIKE
    mixed = setup.precision.is_mixed
    follows = setup.optimizer in STATES_IN_RECIPE_DTYPE
    state_size = setup.optimizer_dtype.itemsize

    def per_param(x: float, mistake: str = "") -> Choice:
        c = label("bytes_per_param", mistake, n=format_count(x))
        return Choice(c.en, c.ur, value=round(x, 2), mistake=mistake)

    named = ".counted" if adam and mixed else ""
    candidates = []
    # the optimizer's own slip first: its states counted as Adam's, or 8-bit ones at full size
    if setup.optimizer is OptimizerKind.adamw_8bit:
        candidates.append(per_param(n - states + 2 * state_size, "bpp.states_full_size"))
    elif not adam:
        candidates.append(per_param(n - states + 2 * state_size, "bpp.adam_states"))
    if mixed:
        if g == 4:
            candidates.append(per_param(n - 2, "bpp.grads_16bit" + named))
        else:
            candidates.append(per_param(n + 2, "bpp.grads_fp32" + named))
        candidates.append(per_param(n - master, "bpp.forgot_master"))
        candidates.append(per_param(w + 2 + 4 + o, "bpp.grad_copy" + named))
    else:
        candidates.append(per_param(n + 4, "bpp.no_master_here"))
        if follows and state_size != 4 and states:
            candidates.append(per_param(n - states + states * 4 / state_size, "bpp.states_fp32"))
    if w != 4:
        states_fp32 = states * 4 / state_size if follows else states
        candidates.append(per_param(4 + 4 + states_fp32, "bpp.as_fp32"))
        if not mixed and not setup.precision.is_amp:
            candidates.append(per_param(w + 4 + 4 + states_fp32, "bpp.as_mixed"))
    candidates.append(per_param(n - g, "bpp.forgot_grads"))
    if o:
        candidates.append(per_param(w + g, "bpp.forgot_optimizer"))
    candidates += [per_param(2 * n, "double"), per_param(n / 2, "half")]
    approx = "=" if float(n).is_integer() else "≈"
    return Draft(
        per_param(n),
        candidates,
        values={
            "w": str(w),
            "g": str(g),
            "o": bytes_text(o),
            "s": bytes_text(states),
            "full_states": str(2 * state_size),
            "n": format_count(n),
            "approx": approx,
            "total": size_text(choose_scale([n * p]), n * p),
        },
        lang_values=_bpp_words(f, states, master),
        numeric=Numeric(value=round(n, 2), unit=AnswerUnit.bytes, tolerance=0.02),
    )


# --- components and activations ------------------------------------------------------------

_COMPONENTS = ("parameters", "gradients", "optimizer", "activations")


@question_kind(
    "dominant-component",
    concept="dominant-memory-component",
    topic=Topic.activations,
    difficulty=Difficulty.medium,
)
def dominant_component(f: ModelFacts) -> Draft | None:
    """The largest of the four components, without recompute or offload; dropped when the
    two largest are within the margin (no clear answer)."""
    b = f.base
    sizes = dict(
        zip(
            _COMPONENTS,
            (b.parameter_bytes, b.gradient_bytes, b.optimizer_bytes, b.activation_bytes),
            strict=True,
        )
    )
    ranked = sorted(_COMPONENTS, key=lambda name: -sizes[name])
    largest = ranked[0]
    if not far_apart(sizes[largest], sizes[ranked[1]]):
        return None
    scale = choose_scale(sizes.values())
    shown = {name: size_text(scale, v) for name, v in sizes.items()}
    distractors = [
        Choice(
            LABELS[Lang.en][name],
            LABELS[Lang.ur][name],
            mistake="dominant.smaller",
            values={"size": shown[name]},
            lang_values={lang: {"term": LABELS[lang][f"term.{name}"]} for lang in Lang},
        )
        for name in ranked[1:]
    ]
    return Draft(
        label(largest),
        distractors,
        values={
            "params_b": shown["parameters"],
            "grads_b": shown["gradients"],
            "opt_b": shown["optimizer"],
            "acts_b": shown["activations"],
            "largest_b": shown[largest],
        },
        lang_values=both(
            lambda lang: {
                "largest": LABELS[lang][largest],
                "largest_term": LABELS[lang][f"term.{largest}"],
            }
        ),
    )


@question_kind(
    "activations",
    concept="activations-whole-model",
    topic=Topic.activations,
    difficulty=Difficulty.hard,
)
def activations(f: ModelFacts) -> Draft:
    """Activations kept from forward to backward, whole model, no recompute."""
    b = f.base
    value = b.activation_bytes
    layers = f.spec.num_layers
    per_block, in_blocks = b.activation_plan.layer_stored(0), b.activation_plan.blocks_stored_bytes
    outside = value - in_blocks
    addition = Sum(((1, in_blocks), (1, outside)), value)
    product = Sum(((layers, per_block),), in_blocks)
    uniform = in_blocks == layers * per_block
    shown = [value, per_block]
    scale = uniform and nice_scale(shown, [addition, product])
    if not scale:  # the product would only add up in KiB or bytes: say "about ... each"
        uniform = False
        scale = nice_scale(shown, [addition]) or choose_scale(shown, [addition])
    candidates = [
        (per_block, "acts.one_layer", {"per_block": size_text(scale, per_block)}),
        (in_blocks, "acts.blocks_only", {"outside": size_text(scale, outside)}),
        (f.full.activation_bytes, "acts.full", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    key = "blocks.uniform" if uniform else "blocks.varied"

    def words(lang: Lang) -> dict[str, str]:
        text = TEMPLATES["activations"][lang].parts[key]
        return {
            "blocks_sentence": text.format(
                layers=str(layers),
                per_block=size_text(scale, per_block, lang),
                in_blocks=size_text(scale, in_blocks, lang),
                product=written_sum(scale, lang, product),
            ),
            "sum": written_sum(scale, lang, addition),
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "per_block": size_text(scale, per_block),
            "outside": size_text(scale, outside),
            "full_value": size_text(scale, f.full.activation_bytes),
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


# --- recompute -----------------------------------------------------------------------------


@question_kind(
    "full-recompute-saves",
    concept="recompute-trades-compute-for-memory",
    topic=Topic.recompute,
    difficulty=Difficulty.medium,
)
def full_recompute_saves(f: ModelFacts) -> Draft:
    """Activation bytes saved by full recompute."""
    none_b, full_b = f.base.activation_bytes, f.full.activation_bytes
    saved = none_b - full_b
    difference = Sum(((1, none_b), (-1, full_b)), saved)
    scale = choose_scale([saved, none_b, full_b], [difference])
    n = f.spec.num_layers
    candidates = [
        (none_b, "saves.as_zero", {}),
        (full_b, "saves.kept", {}),
        (saved / n, "saves.per_layer", {}),
        (gb_read_as_gib(saved), "gb_as_gib", {"gb": gb_text(saved)}),
        *size_fallbacks(saved),
    ]
    return Draft(
        size(scale, saved),
        readable_sizes(scale, candidates),
        values={
            "none_value": size_text(scale, none_b),
            "full_value": size_text(scale, full_b),
            "rebuild": size_text(scale, f.full.activation_plan.rebuild_bytes),
        },
        lang_values=both(lambda lang: {"difference": written_sum(scale, lang, difference)}),
        numeric=numeric_size(scale, saved),
    )


def _percent(fraction: float, mistake: str = "") -> Choice:
    text = format_percent(fraction)
    return Choice(text, text, value=round(100 * fraction, 1), mistake=mistake)


@question_kind(
    "full-recompute-flops",
    concept="full-recompute-flops-overhead",
    topic=Topic.recompute,
    difficulty=Difficulty.medium,
)
def full_recompute_flops(f: ModelFacts) -> Draft:
    """Extra step FLOPs of full recompute, as a percentage of the step. The textbook +33.3%
    is a distractor only when it is clearly off for this model; when it is close, the
    explanation says so (the bank's "about +33%" is then right for this model too)."""
    full = f.full
    value = full.extra_flops_fraction
    in_blocks = full.extra_forward_flops / full.forward_flops
    close = not far_apart(100 * value, 100 / 3)
    candidates = [
        _percent(in_blocks, "flops.of_forward"),
        _percent(1.0, "flops.whole_step"),
        _percent(0.5, "flops.against_backward"),
        _percent(2 / 3, "flops.two_forwards"),
    ]
    if not close:
        candidates.insert(1, _percent(1 / 3, "flops.textbook"))
    value_text = format_percent(value)
    return Draft(
        _percent(value),
        candidates,
        values={
            "step_flops": format_flops(3 * full.forward_flops),
            "forward": format_flops(full.forward_flops),
            "extra": format_flops(full.extra_forward_flops),
            "of_forward": f"{100 * in_blocks:.1f}%",
            "outside_share": f"{100 * (1 - in_blocks):.1f}%",
            "extra_time": format_seconds(full.extra_seconds),
        },
        lang_values=both(
            lambda lang: {
                "textbook_sentence": TEMPLATES["full-recompute-flops"][lang]
                .parts["close" if close else "far"]
                .format(
                    value=value_text,
                    of_forward=f"{100 * in_blocks:.1f}%",
                    outside_share=f"{100 * (1 - in_blocks):.1f}%",
                )
            }
        ),
        numeric=Numeric(
            value=round(100 * value, 1), unit=AnswerUnit.percent, tolerance=PERCENT_TOLERANCE
        ),
    )


def _count(x: int, mistake: str = "") -> Choice:
    return Choice(str(x), str(x), value=float(x), mistake=mistake)


@question_kind(
    "sqrt-checkpoints",
    concept="sqrt-n-checkpointing",
    topic=Topic.recompute,
    difficulty=Difficulty.hard,
    variation=Variation.depth,
)
def sqrt_checkpoints(f: ModelFacts) -> Draft:
    """Checkpoints kept by sqrt(N) placement: ceil(N / round(sqrt(N)))."""
    n, k = f.spec.num_layers, f.k
    value = f.sqrt.activation_plan.checkpoints
    candidates = [
        _count(n, "sqrt.every_block"),
        _count(k, "sqrt.segment_length") if k != value else _count(n // 2, "sqrt.half"),
        _count(1, "sqrt.one"),
        _count(n // 2, "sqrt.half"),
        _count(value + 1, "sqrt.off_by_one"),
        _count(value - 1, "sqrt.off_by_one"),
        _count(2 * value, "double"),
    ]
    scale = choose_scale([f.sqrt.activation_bytes, f.full.activation_bytes])
    return Draft(
        _count(value),
        [c for c in candidates if c.value is not None and c.value >= 1],
        values={
            "sqrt_acts": size_text(scale, f.sqrt.activation_bytes),
            "full_acts": size_text(scale, f.full.activation_bytes),
            "rebuild": size_text(scale, f.sqrt.activation_plan.rebuild_bytes),
        },
        numeric=Numeric(value=float(value), unit=AnswerUnit.counted, tolerance=0.0),
    )


@question_kind(
    "sqrt-flops",
    concept="sqrt-n-checkpointing",
    topic=Topic.recompute,
    difficulty=Difficulty.medium,
    variation=Variation.depth,
)
def sqrt_flops(f: ModelFacts) -> Draft | None:
    """Extra step FLOPs of sqrt(N) checkpointing: every segment is replayed once in
    backward, so every block's forward runs once more -- the same as full recompute (Chen et
    al. 2016: O(sqrt N) memory for one extra forward). What differs is the memory at
    backward's worst moment, which the explanation compares. Left out when the estimate's two
    FLOPs figures differ (the explanation says they are equal)."""
    k = f.k
    if k < 2:
        return None
    sq, full = f.sqrt, f.full
    value = sq.extra_flops_fraction
    if value <= 0 or relative_gap(value, full.extra_flops_fraction) > 1e-9:
        return None
    # replaying from the checkpoint up to each block for that block's backward runs
    # 1 + 2 + ... + k = k(k + 1)/2 block forwards per segment of k: (k + 1)/2 times the cost;
    # rebuilding the whole segment for each block's backward is k times it
    candidates = [
        _percent(value / k, "sqrt.flops_per_k"),
        _percent(0.0, "sqrt.flops_free"),
        _percent(value * (k + 1) / 2, "sqrt.flops_per_block"),
        _percent(value * k, "sqrt.flops_segment_per_block"),
    ]
    worst = [sq.activation_plan.peak_activation_bytes, full.activation_plan.peak_activation_bytes]
    scale = choose_scale([*worst, f.base.activation_bytes])
    lighter = "full_lighter" if worst[1] < worst[0] else "sqrt_lighter"
    checkpoints = str(-(-f.spec.num_layers // k))
    return Draft(
        _percent(value),
        candidates,
        values={
            "full_pct": format_percent(full.extra_flops_fraction),
            "extra": format_flops(sq.extra_forward_flops),
            "sqrt_worst": size_text(scale, worst[0]),
            "full_worst": size_text(scale, worst[1]),
            "none_acts": size_text(scale, f.base.activation_bytes),
            "checkpoints": checkpoints,
        },
        lang_values=both(
            lambda lang: {
                "memory_sentence": TEMPLATES["sqrt-flops"][lang]
                .parts[lighter]
                .format(k=str(k), checkpoints=checkpoints)
            }
        ),
        numeric=Numeric(
            value=round(100 * value, 1), unit=AnswerUnit.percent, tolerance=PERCENT_TOLERANCE
        ),
    )


def every_k_of(n: int) -> int:
    """The k the every-k question asks about: 4 (as in ``--every 4``) for deep models, 2 for
    shallow ones, never the sqrt(N) k the sqrt question uses when another fits."""
    return 4 if n >= 8 else 2 if n >= 4 else 1


@question_kind(
    "every-k-peak",
    concept="every-k-checkpoint-segment-size",
    topic=Topic.recompute,
    difficulty=Difficulty.hard,
)
def every_k_peak(f: ModelFacts) -> Draft | None:
    """Activations alive at the worst moment of backward with a checkpoint every k blocks:
    the kept checkpoints (and the tensors outside the blocks) plus one rebuilt segment."""
    n = f.spec.num_layers
    k = every_k_of(n)
    if k < 2:
        return None
    plan = f.every(k).activation_plan
    kept, rebuilt = plan.stored_bytes, plan.rebuild_bytes
    value = kept + rebuilt
    one_block = f.base.activation_plan.layer_stored(0)
    total = Sum(((1, kept), (1, rebuilt)), value)
    scale = choose_scale([value, kept, rebuilt], [total])
    candidates = [
        (kept, "everyk.forgot_rebuild", {"rebuild": size_text(scale, rebuilt)}),
        (kept + one_block, "everyk.one_block", {}),
        (f.full.activation_plan.peak_activation_bytes, "everyk.full", {}),
        (f.base.activation_bytes, "everyk.none", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values={
            "every": str(k),
            "segments": str(plan.checkpoints),
            "kept": size_text(scale, kept),
            "rebuilt": size_text(scale, rebuilt),
            "block": size_text(scale, one_block),
        },
        lang_values=both(lambda lang: {"sum": written_sum(scale, lang, total)}),
        numeric=numeric_size(scale, value),
    )


@question_kind(
    "every-k-best",
    concept="every-k-checkpoint-segment-size",
    topic=Topic.recompute,
    difficulty=Difficulty.hard,
    variation=Variation.depth,
)
def every_k_best(f: ModelFacts) -> Draft | None:
    """Which of four checkpoint spacings k leaves the least activation memory alive at the
    worst moment of backward (kept checkpoints + one rebuilt segment of k blocks)."""
    n = f.spec.num_layers
    if n < 4:
        return None
    ks = sorted({1, 2, 4, f.k, 2 * f.k, n // 2, n} & set(range(1, n + 1)))
    plans = {k: f.every(k).activation_plan for k in ks}
    worst = {k: plans[k].stored_bytes + plans[k].rebuild_bytes for k in ks}
    best = min(ks, key=lambda k: (worst[k], k))
    scale = choose_scale(worst.values())

    def option(k: int, mistake: str = "") -> Choice:
        c = label("every_k", mistake, k=str(k))
        return Choice(
            c.en,
            c.ur,
            value=scale.shown_bytes(worst[k]),
            mistake=mistake,
            values={"worst": size_text(scale, worst[k]), "k": str(k)},
        )

    preference = [f.k, n, 1, 2, 4, 2 * f.k, n // 2]
    others = [k for k in dict.fromkeys(preference) if k in plans and k != best]
    chosen = pick_options(
        option(best), [option(k, "everyk.k1" if k == 1 else "everyk.worse") for k in others]
    )
    if chosen is None:
        return None
    shown_ks = sorted(int(c.values.get("k", best)) for c in chosen)
    block = f.base.activation_plan.layer_stored(0)
    outside = f.base.activation_bytes - f.base.activation_plan.blocks_stored_bytes
    block_input = (f.full.activation_bytes - outside) / n
    k_star = math.sqrt(n * block_input / block) if block else 1.0
    inputs = choose_scale([block_input, block])

    def words(lang: Lang) -> dict[str, str]:
        w = LABELS[lang]
        lines = w["list_join"].join(
            w["every_k_line"].format(k=str(k), worst=size_text(scale, worst[k], lang))
            for k in shown_ks
        )
        return {"lines": lines}

    return Draft(
        chosen[0],
        chosen[1:],
        values={
            "best": str(best),
            "best_worst": size_text(scale, worst[best]),
            "input": size_text(inputs, block_input),
            "block": size_text(inputs, block),
            "k_star": f"{k_star:.1f}",
        },
        lang_values=both(words),
    )


# --- the peak and the cheapest way to fit ------------------------------------------------


@question_kind(
    "fits",
    concept="peak-is-a-timeline",
    topic=Topic.activations,
    difficulty=Difficulty.medium,
)
def fits(f: ModelFacts) -> Draft:
    """Peak of the step (a timeline, not a sum) and whether it fits; the prompt shows every
    input of the peak the learner cannot know: the runtime overhead and the optimizer
    step's temporaries."""
    b, memory = f.base, f.gpu.memory_bytes
    m, overhead = b.peak, b.overhead_bytes
    temps = b.optimizer_detail.step_temporary_bytes
    value = b.peak_bytes
    parts = Sum(
        (
            (1, m.parameter_bytes),
            (1, m.gradient_bytes),
            (1, m.optimizer_bytes),
            (1, m.activation_bytes),
            (1, m.transient_bytes),
            (1, overhead),
        ),
        value,
    )
    with_overhead = Sum(((1, m.total_bytes), (1, overhead)), value)
    sum_all = b.steady_bytes + overhead
    states_only = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes + overhead
    shown = [value, b.parameter_bytes, b.gradient_bytes, b.optimizer_bytes, b.activation_bytes]
    scale = (
        nice_scale(shown, [parts, with_overhead])
        or nice_scale(shown, [with_overhead])
        or choose_scale(shown, [with_overhead])
    )
    itemized = scale.holds(parts)

    def peak(
        num_bytes: float,
        mistake: str = "",
        fit: bool | None = None,
        values: dict[str, str] | None = None,
    ) -> Choice:
        # a peak of this size is judged as the estimate judges its own: within the usable
        # memory (the device's less the --headroom reserve)
        ok = num_bytes <= b.usable_bytes if fit is None else fit
        verdict = "fits" if ok else "does_not_fit"
        en, ur = (
            LABELS[lang]["peak_verdict"].format(
                value=size_text(scale, num_bytes, lang), verdict=LABELS[lang][verdict]
            )
            for lang in Lang
        )
        return Choice(
            en,
            ur,
            value=scale.shown_bytes(num_bytes),
            group=verdict,
            mistake=mistake,
            values=values or {},
        )

    candidates = [
        (sum_all, "fits.sum_all", {}),
        (states_only, "fits.states_only", {}),
        (m.total_bytes, "fits.no_overhead", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    # the right size with the other verdict comes first, so "does not fit" is always offered
    # beside a "fits" answer and the other way round; inside the headroom band (over the
    # usable memory, within the device's) that verdict is the headroom forgotten
    in_band = b.usable_bytes < value <= memory
    verdict_slip = "fits.headroom_forgotten" if in_band else "fits.verdict"
    distractors = [peak(value, verdict_slip, fit=not b.fits)]
    distractors += [
        peak(x, k, values=v) for x, k, v in in_units_of(scale, candidates) if scale.readable(x)
    ]
    names = [
        "term.parameters",
        "term.gradients",
        "term.optimizer",
        "term.activations",
        "term.transient",
        "term.overhead",
    ]

    def names_ov(lang: Lang) -> str:
        return LABELS[lang]["term.overhead"]

    temps_key = (
        "temps.none"
        if not temps
        else "temps.foreach"
        if f.setup.optimizer_foreach
        else ("temps.single")
    )
    phase = m.phase

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["fits"][lang].parts
        return {
            "temps_sentence": tpl[temps_key].format(temps=size_text(scale, temps, lang)),
            "phase": LABELS[lang].get(f"phase.{phase}", phase),
            "verdict": LABELS[lang]["fits" if b.fits else "does_not_fit"],
            "moment": written_sum(scale, lang, parts, [LABELS[lang][n] for n in names])
            if itemized
            else LABELS[lang]["moment_list"].format(
                items=LABELS[lang]["list_sep"].join(
                    f"{LABELS[lang][n]} {size_text(scale, t, lang)}"
                    for n, (_, t) in zip(names[:5], parts.terms[:5], strict=True)
                    if t
                ),
                sum=written_sum(
                    scale, lang, with_overhead, [LABELS[lang]["term.tensors"], names_ov(lang)]
                ),
            ),
        }

    return Draft(
        peak(value, fit=b.fits),  # the estimate's own verdict (reserved memory where replayed)
        distractors,
        values={
            "where": m.where,
            "params_b": size_text(scale, b.parameter_bytes),
            "grads_b": size_text(scale, b.gradient_bytes),
            "opt_b": size_text(scale, b.optimizer_bytes),
            "acts_b": size_text(scale, b.activation_bytes),
            "overhead": size_text(scale, overhead),
            "sum_value": size_text(scale, sum_all),
            "gpu_memory": size_text(scale, memory),
            "reserve": size_text(scale, b.reserve_bytes),
            "usable": size_text(scale, b.usable_bytes),
        },
        lang_values=both(words),
        numeric=numeric_size(scale, value),
    )


def _strategy(b: Breakdown, mistake: str, **values: str) -> Choice:
    return Choice(
        strategy_label(b.options, Lang.en),
        strategy_label(b.options, Lang.ur),
        mistake=mistake,
        values=values,
    )


MAX_TIES_NAMED = 3
"""Strategies as cheap as the answer named in its explanation (the rest are counted)."""


def closest_miss(candidates: tuple[Breakdown, ...]) -> Breakdown:
    """The strategy that misses by the least, as ``memcalc estimate``'s verdict names it:
    the least over the usable GPU memory, then the least over host RAM and NVMe."""
    return min(candidates, key=lambda b: (b.over_gpu_bytes, b.over_host_bytes + b.over_nvme_bytes))


@question_kind(
    "cheapest-fit",
    concept="offload-complements-recompute",
    topic=Topic.offload,
    difficulty=Difficulty.hard,
)
def cheapest_fit_question(f: ModelFacts) -> Draft:
    """The fitting strategy with the least added time (``memcalc.plan.cheapest_fit``) among
    the strategies ``memcalc estimate`` compares for this setup (``ModelFacts.strategies``),
    so the answer is the strategy its verdict line names -- or "none fits" when it says
    nothing fits. The prompt says how ties are broken; strategies that cost about the same
    as the answer (within the margin) are never offered as wrong options, and the
    explanation names them."""
    candidates, memory = f.strategies, f.gpu.memory_bytes
    answer = cheapest_fit(candidates)
    base = candidates[0]
    scale = choose_scale([b.peak_bytes for b in candidates] + [memory, base.usable_bytes])
    host = choose_scale([b.host_bytes_per_node for b in candidates] + [base.host_memory_per_node])

    def peak_of(b: Breakdown) -> str:
        return size_text(scale, b.peak_bytes)

    def tied(b: Breakdown) -> bool:
        if answer is None or not b.fits or b is answer:
            return False
        cost, best = added_seconds(b), added_seconds(answer)
        return not far_apart(cost, best) or abs(cost - best) < 1e-4

    ties = [b for b in candidates if tied(b)]
    distractors: list[Choice] = []
    answer_cost = format_seconds(added_seconds(answer)) if answer else ""
    full_alone = next(
        b for b in candidates if b.options.recompute is Recompute.full and not b.options.offload
    )
    ordered = [full_alone] + [b for b in candidates if b is not full_alone]
    for b in ordered:
        if b is answer or b in ties:
            continue
        if not b.fits:
            if not b.over_gpu_bytes:
                key = "cheap.host_not_fit"
            elif b is full_alone:
                key = "cheap.recompute_alone"
            else:
                key = "cheap.base_not_fit" if b is base else "cheap.not_fit"
            distractors.append(
                _strategy(
                    b,
                    key,
                    peak=peak_of(b),
                    host=size_text(host, b.host_bytes_per_node),
                    host_memory=size_text(host, b.host_memory_per_node),
                )
            )
        elif answer is base:
            distractors.append(
                _strategy(b, "cheap.unneeded", cost=format_seconds(added_seconds(b)))
            )
        else:
            distractors.append(
                _strategy(
                    b,
                    "cheap.costlier",
                    peak=peak_of(b),
                    cost=format_seconds(added_seconds(b)),
                    answer_cost=answer_cost,
                )
            )
    if answer is None:
        correct = label("none_fits")
    else:
        correct = _strategy(answer, "")
        distractors.append(label("none_fits", "cheap.none_fits"))

    next_cheapest = sorted(
        (b for b in candidates if b.fits and b is not answer and b not in ties),
        key=lambda b: (added_seconds(b), b.peak_bytes),
    )[:2]
    closest = closest_miss(candidates)

    def cost_items(rows: list[Breakdown], lang: Lang) -> list[str]:
        return [
            LABELS[lang]["cost_item"].format(
                label=strategy_label(b.options, lang),
                peak=peak_of(b),
                cost=format_seconds(added_seconds(b)),
            )
            for b in rows
        ]

    def words(lang: Lang) -> dict[str, str]:
        parts, w = TEMPLATES["cheapest-fit"][lang].parts, LABELS[lang]
        fill = {
            "base_peak": peak_of(base),
            "gpu_memory": size_text(scale, memory, lang),
            "usable": size_text(scale, base.usable_bytes, lang),
            "answer_cost": answer_cost,
        }
        if answer is None:
            miss = "none" if closest.over_gpu_bytes else "none_host"
            body = parts[miss].format(
                **fill,
                best=strategy_label(closest.options, lang),
                best_after=strategy_phrase(closest.options, lang),
                best_peak=peak_of(closest),
                host=size_text(host, closest.host_bytes_per_node, lang),
                host_memory=size_text(host, closest.host_memory_per_node, lang),
            )
            body += " " + parts["advice_batch" if f.setup.batch > 1 else "advice"]
        elif answer is base:
            body = parts["already"].format(**fill)
        else:
            others = w["list_join"].join(cost_items(next_cheapest, lang))
            body = parts["cheapest"].format(
                **fill,
                answer=strategy_label(answer.options, lang),
                answer_peak=peak_of(answer),
                others=parts["others"].format(items=others) if others else "",
                lesson=""
                if full_alone.fits
                else parts["lesson"].format(full_peak=peak_of(full_alone)),
            )
        if ties:
            items = cost_items(ties[:MAX_TIES_NAMED], lang)
            if len(ties) > MAX_TIES_NAMED:
                items.append(w["more_items"].format(n=len(ties) - MAX_TIES_NAMED))
            body += " " + parts["ties"].format(items=w["list_join"].join(items))
        return {
            "body": body.strip(),
            "answer_label": strategy_label(answer.options, lang) if answer else "",
            "answer_peak": peak_of(answer) if answer else "",
            "strategies": w["list_join"].join(
                strategy_label(b.options, lang) if b is not base else w["no_strategy"]
                for b in candidates
            ),
        }

    return Draft(
        correct,
        distractors,
        values={
            "overhead": size_text(scale, f.gpu.runtime_overhead_bytes),
            "usable": size_text(scale, base.usable_bytes),
            "reserve": size_text(scale, base.reserve_bytes),
        },
        lang_values=both(words),
    )
