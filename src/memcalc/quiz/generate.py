"""Questions generated from the learner's model: every number comes from ``estimate``.

Each generator reads the Breakdowns of the learner's model, setup and GPU (``ModelFacts``) and
returns the correct option, distractors built from real mistakes (forgetting the fp32 master
weights, 16 vs 18 bytes per parameter, GB read as GiB, one layer's activations taken for the
whole model's, activations under full recompute counted as zero, ...) and the numbers its
explanation shows. The words, in English and Urdu, are in ``templates.py``. No answer is typed
by hand: the correct option is formatted from the Breakdown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from memcalc.estimate import Breakdown, Options, estimate
from memcalc.plan import added_seconds, candidate_options, cheapest_fit
from memcalc.profiles import GpuProfile
from memcalc.quiz.bank import NUM_OPTIONS, Difficulty, Lang, Question, Text, Topic
from memcalc.quiz.templates import CONTEXT, LABELS, TEMPLATES
from memcalc.spec.model import ModelSpec
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute, sqrt_k
from memcalc.units import GB, GIB, Unit, format_bytes, format_flops, format_seconds

MODEL_ID_PREFIX = "model-"
"""Generated question ids are ``model-<kind>``; bank ids never start with it."""


class Kind(NamedTuple):
    """What a generated question teaches, and how it is filed."""

    concept: str
    topic: Topic
    difficulty: Difficulty


KINDS: dict[str, Kind] = {
    "weights": Kind("weights-bytes-per-dtype", Topic.parameters, Difficulty.easy),
    "optimizer-states": Kind("optimizer-state-count", Topic.optimizer, Difficulty.easy),
    "bytes-per-param": Kind(
        "bytes-per-param-mixed-precision-adamw", Topic.precision, Difficulty.medium
    ),
    "dominant-component": Kind("dominant-memory-component", Topic.activations, Difficulty.medium),
    "activations": Kind("activations-whole-model", Topic.activations, Difficulty.hard),
    "full-recompute-saves": Kind(
        "recompute-trades-compute-for-memory", Topic.recompute, Difficulty.medium
    ),
    "full-recompute-flops": Kind("full-recompute-extra-flops", Topic.recompute, Difficulty.medium),
    "sqrt-checkpoints": Kind("sqrt-n-checkpointing", Topic.recompute, Difficulty.hard),
    "fits": Kind("peak-is-a-timeline", Topic.activations, Difficulty.medium),
    "cheapest-fit": Kind("offload-complements-recompute", Topic.offload, Difficulty.hard),
}
"""Every generated question kind; its templates are ``TEMPLATES[kind]``."""


@dataclass(frozen=True)
class ModelFacts:
    """The estimates the generated questions read, for one model, setup and GPU."""

    spec: ModelSpec
    setup: TrainingSetup
    gpu: GpuProfile
    base: Breakdown
    """No recompute, no offload."""
    full: Breakdown
    """Full recompute (every block keeps only its input)."""
    sqrt: Breakdown
    """Checkpoint every k = sqrt_k(N) blocks."""
    strategies: tuple[Breakdown, ...]
    """Every recompute x offload candidate, ``base`` first."""

    @property
    def k(self) -> int:
        """Segment length of sqrt(N) checkpointing."""
        return sqrt_k(self.spec.num_layers)


def model_facts(spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile) -> ModelFacts:
    """Run ``estimate`` for every strategy the questions need."""
    k = sqrt_k(spec.num_layers)
    strategies = tuple(estimate(spec, setup, gpu, o) for o in candidate_options(spec.num_layers))
    return ModelFacts(
        spec=spec,
        setup=setup,
        gpu=gpu,
        base=strategies[0],
        full=estimate(spec, setup, gpu, Options(recompute=Recompute.full)),
        sqrt=estimate(spec, setup, gpu, Options(recompute=Recompute.every_k, every=k)),
        strategies=strategies,
    )


def strategy_label(options: Options, lang: Lang) -> str:
    """A strategy in words, e.g. ``full recompute + optimizer states to CPU``."""
    words = LABELS[lang]
    parts = []
    if options.recompute is not Recompute.none:
        parts.append(words[f"recompute.{options.recompute.value}"].format(k=options.every))
    parts += [words[f"offload.{o.what.value}"] for o in options.offload]
    return words["strategy_join"].join(parts) if parts else words["nothing_needed"]


def model_questions(spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile) -> list[Question]:
    """One question of every kind in ``KINDS``, for this model, setup and GPU."""
    facts = model_facts(spec, setup, gpu)
    return [_build(kind, facts, GENERATORS[kind](facts)) for kind in KINDS]


# --- building blocks ---------------------------------------------------------------------


class Choice(NamedTuple):
    """One option, in both languages."""

    en: str
    ur: str

    @classmethod
    def same(cls, text: str) -> Choice:
        """An option written the same way in both languages (a number with its unit)."""
        return cls(text, text)

    def text(self, lang: Lang) -> str:
        """The option in ``lang``."""
        return self.en if lang is Lang.en else self.ur

    @classmethod
    def label(cls, key: str, **values: str) -> Choice:
        """An option from ``LABELS``."""
        return cls(*(LABELS[lang][key].format(**values) for lang in Lang))


def _gib(num_bytes: int | float) -> Choice:
    return Choice.same(format_bytes(num_bytes, Unit.GiB))


def gb_read_as_gib(num_bytes: int) -> int:
    """The bytes someone claims when they compute GB (10^9) and write GiB (2^30).

    >>> format_bytes(gb_read_as_gib(2**30))
    '1.07 GiB'
    """
    return num_bytes * GIB // GB


def _fmt_num(x: float) -> str:
    """An integer without decimals, anything else with two."""
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


@dataclass(frozen=True)
class Draft:
    """A generated question before it becomes a ``Question``: correct option first."""

    correct: Choice
    distractors: list[Choice]
    """Candidates in order of preference; the first distinct ones are used."""
    values: dict[str, str] = field(default_factory=dict)
    """Numbers for the templates, the same in both languages."""
    lang_values: dict[Lang, dict[str, str]] = field(default_factory=dict)
    """Words for the templates, per language."""


def _pick(correct: Choice, candidates: Iterable[Choice]) -> list[Choice]:
    """The correct option and the first ``NUM_OPTIONS - 1`` distinct distractors."""
    chosen = [correct]
    for c in candidates:
        if all(c.en.strip() != o.en.strip() and c.ur.strip() != o.ur.strip() for o in chosen):
            chosen.append(c)
        if len(chosen) == NUM_OPTIONS:
            return chosen
    raise RuntimeError(f"not enough distinct options for {correct.en!r}")  # a generator bug


def _byte_fallbacks(value: int) -> list[Choice]:
    """Plausible wrong sizes when the mistakes coincide with the answer (e.g. fp32 has no
    master weights to forget)."""
    scaled = [value * f for f in (2, 0.5, 4, 1.5)] if value else []
    return [_gib(x) for x in scaled + [GIB * n for n in (1, 2, 4, 8)]]


def _common(facts: ModelFacts, lang: Lang) -> dict[str, str]:
    setup, gpu = facts.setup, facts.gpu
    values = {
        "model": facts.spec.name,
        "params": f"{facts.base.params.total:,}",
        "layers": str(facts.spec.num_layers),
        "batch": str(setup.batch),
        "seq": str(setup.seq),
        "tokens": f"{setup.tokens:,}",
        "precision": setup.precision.value,
        "optimizer": setup.optimizer.value,
        "gpu": gpu.display_name,
        "gpu_memory": format_bytes(gpu.memory_bytes),
        "k": str(facts.k),
    }
    values["ctx"] = CONTEXT[lang].format(**values)
    return values


def _build(kind: str, facts: ModelFacts, draft: Draft) -> Question:
    options = _pick(draft.correct, draft.distractors)
    texts = {}
    for lang in Lang:
        values = (
            {"value": draft.correct.text(lang)}
            | _common(facts, lang)
            | draft.values
            | draft.lang_values.get(lang, {})
        )
        template = TEMPLATES[kind][lang]
        texts[lang.value] = Text(
            prompt=template.prompt.format(**values),
            options=[o.text(lang) for o in options],
            explanation=template.explanation.format(**values),
        )
    meta = KINDS[kind]
    return Question(
        id=MODEL_ID_PREFIX + kind,
        concept=meta.concept,
        topic=meta.topic,
        difficulty=meta.difficulty,
        correct=0,
        **texts,
    )


# --- one generator per kind ----------------------------------------------------------------


def weights(facts: ModelFacts) -> Draft:
    """Bytes of the weights: parameters x bytes of the weight dtype."""
    b, setup = facts.base, facts.setup
    p, w = b.params.total, setup.weight_dtype.itemsize
    other = 2 if w == 4 else 4  # the wrong dtype: fp32 for 16-bit weights and vice versa
    value = b.parameter_bytes
    return Draft(
        _gib(value),
        [
            _gib(p * other),
            _gib(gb_read_as_gib(value)),
            _gib(b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes),
            *_byte_fallbacks(value),
        ],
        values={
            "weight_dtype": setup.weight_dtype.value,
            "weight_bytes": str(w),
            "value_bytes": f"{value:,}",
            "value_gb": format_bytes(value, Unit.GB),
            "gb_as_gib": format_bytes(gb_read_as_gib(value)),
            "grads": format_bytes(b.gradient_bytes),
            "optimizer": format_bytes(b.optimizer_bytes),
        },
    )


def optimizer_states(facts: ModelFacts) -> Draft:
    """Bytes the optimizer holds: states + fp32 master weights + step tensors."""
    b, setup = facts.base, facts.setup
    detail, p = b.optimizer_detail, b.params.total
    value = b.optimizer_bytes
    no_master = value - detail.master_weight_bytes
    per_param = detail.state_bytes / (p * setup.optimizer_dtype.itemsize)
    # The 16-bit mistake: states kept in the weight dtype instead of fp32.
    states_16bit = (
        detail.state_bytes // setup.optimizer_dtype.itemsize * setup.weight_dtype.itemsize
        + detail.master_weight_bytes
        + detail.step_tensor_bytes
    )
    values = {
        "states_per_param": _fmt_num(per_param),
        "state_dtype": setup.optimizer_dtype.value,
        "states": format_bytes(detail.state_bytes),
        "master": format_bytes(detail.master_weight_bytes),
        "step_bytes": f"{detail.step_tensor_bytes:,}",
        "no_master": format_bytes(no_master),
    }
    part = "master_mixed" if setup.precision.is_mixed else "master_none"
    lang_values = {}
    for lang in Lang:
        sentence = TEMPLATES["optimizer-states"][lang].parts[part]
        lang_values[lang] = {"master_sentence": sentence.format(**(_common(facts, lang) | values))}
    return Draft(
        _gib(value),
        [
            _gib(no_master),
            _gib(states_16bit),
            _gib(gb_read_as_gib(value)),
            _gib(b.parameter_bytes + b.gradient_bytes + value),
            *_byte_fallbacks(value),
        ],
        values=values,
        lang_values=lang_values,
    )


def bytes_per_param(facts: ModelFacts) -> Draft:
    """Weights + gradients + optimizer states (with master weights) per parameter."""
    b, setup = facts.base, facts.setup
    p = b.params.total
    w, g = setup.weight_dtype.itemsize, setup.gradient_dtype.itemsize
    o = (b.optimizer_detail.state_bytes + b.optimizer_detail.master_weight_bytes) / p
    n = w + g + o
    master = b.optimizer_detail.master_weight_bytes / p

    def per_param(x: float) -> Choice:
        return Choice.label("bytes_per_param", n=_fmt_num(x))

    return Draft(
        per_param(n),
        # 16-bit gradients (ZeRO's 16), no master weights, 16-bit gradients + an fp32 copy (20).
        [
            per_param(w + w + o),
            per_param(n - master),
            per_param(w + w + 4 + o),
            *(per_param(x) for x in (18, 16, 20, 12, 14, 8, 6, 4)),
        ],
        values={
            "w": str(w),
            "g": str(g),
            "o": _fmt_num(o),
            "n": _fmt_num(n),
            "weight_dtype": setup.weight_dtype.value,
            "grad_dtype": setup.gradient_dtype.value,
            "total": format_bytes(n * p),
        },
    )


def dominant_component(facts: ModelFacts) -> Draft:
    """The largest of the four components, without recompute or offload."""
    b = facts.base
    sizes = {
        "parameters": b.parameter_bytes,
        "gradients": b.gradient_bytes,
        "optimizer": b.optimizer_bytes,
        "activations": b.activation_bytes,
    }
    largest = max(sizes, key=lambda name: sizes[name])
    return Draft(
        Choice.label(largest),
        [Choice.label(name) for name in sizes if name != largest],
        values={
            "params_b": format_bytes(b.parameter_bytes),
            "grads_b": format_bytes(b.gradient_bytes),
            "opt_b": format_bytes(b.optimizer_bytes),
            "acts_b": format_bytes(b.activation_bytes),
        },
        lang_values={lang: {"largest": LABELS[lang][largest]} for lang in Lang},
    )


def activations(facts: ModelFacts) -> Draft:
    """Activations kept from forward to backward, whole model, no recompute."""
    b = facts.base
    value = b.activation_bytes
    per_block = b.activation_plan.layer_stored(0)
    in_blocks = b.activation_plan.blocks_stored_bytes
    return Draft(
        _gib(value),
        [
            _gib(per_block),
            _gib(in_blocks),
            _gib(facts.full.activation_bytes),
            _gib(gb_read_as_gib(value)),
            *_byte_fallbacks(value),
        ],
        values={
            "per_block": format_bytes(per_block),
            "outside": format_bytes(value - in_blocks),
            "full_value": format_bytes(facts.full.activation_bytes),
        },
    )


def full_recompute_saves(facts: ModelFacts) -> Draft:
    """Activation bytes saved by full recompute."""
    none_b, full_b = facts.base.activation_bytes, facts.full.activation_bytes
    saved = none_b - full_b
    return Draft(
        _gib(saved),
        [
            _gib(none_b),
            _gib(saved / facts.spec.num_layers),
            _gib(gb_read_as_gib(saved)),
            *_byte_fallbacks(saved),
        ],
        values={
            "none_value": format_bytes(none_b),
            "full_value": format_bytes(full_b),
            "rebuild": format_bytes(facts.full.activation_plan.rebuild_bytes),
        },
    )


def _percent(fraction: float) -> Choice:
    return Choice.same(f"+{100 * fraction:.1f}%")


def full_recompute_flops(facts: ModelFacts) -> Draft:
    """Extra step FLOPs of full recompute, as a percentage of the step."""
    full = facts.full
    of_forward = full.extra_forward_flops / full.forward_flops
    return Draft(
        _percent(full.extra_flops_fraction),
        [
            _percent(of_forward),
            _percent(1 / 3),
            _percent(1.0),
            *(_percent(x) for x in (0.5, 0.0, 2 / 3, 0.25)),
        ],
        values={
            "step_flops": format_flops(3 * full.forward_flops),
            "extra": format_flops(full.extra_forward_flops),
            "of_forward": f"{100 * of_forward:.1f}%",
            "extra_time": format_seconds(full.extra_seconds),
            "mfu": f"{full.options.mfu:.0%}",
        },
    )


def sqrt_checkpoints(facts: ModelFacts) -> Draft:
    """Checkpoints kept by sqrt(N) placement: ceil(N / round(sqrt(N)))."""
    n, k = facts.spec.num_layers, facts.k
    value = facts.sqrt.activation_plan.checkpoints
    numbers = [n, k, 1, n // 2, value + 1, value - 1, 2 * value, value + 2]
    return Draft(
        Choice.same(str(value)),
        [Choice.same(str(x)) for x in numbers if x >= 0],
        values={
            "sqrt_acts": format_bytes(facts.sqrt.activation_bytes),
            "full_acts": format_bytes(facts.full.activation_bytes),
            "rebuild": format_bytes(facts.sqrt.activation_plan.rebuild_bytes),
        },
    )


def fits(facts: ModelFacts) -> Draft:
    """Peak of the step (a timeline, not a sum) and whether it fits on the GPU."""
    b, memory = facts.base, facts.gpu.memory_bytes

    def peak(num_bytes: int, claimed_fit: bool | None = None) -> Choice:
        """``<size>: fits / does not fit``; the verdict follows the size unless claimed."""
        ok = num_bytes <= memory if claimed_fit is None else claimed_fit
        verdict = "fits" if ok else "does_not_fit"
        return Choice(
            *(
                LABELS[lang]["peak_verdict"].format(
                    value=format_bytes(num_bytes), verdict=LABELS[lang][verdict]
                )
                for lang in Lang
            )
        )

    sum_bytes = b.steady_bytes + b.overhead_bytes
    states_only = b.parameter_bytes + b.gradient_bytes + b.optimizer_bytes + b.overhead_bytes
    verdict_key = "fits" if b.fits else "does_not_fit"
    return Draft(
        peak(b.peak_bytes),
        [
            peak(sum_bytes),
            peak(states_only),
            peak(gb_read_as_gib(b.peak_bytes)),
            peak(b.peak_bytes, not b.fits),
            *(peak(int(b.peak_bytes * f)) for f in (2, 0.5, 4, 1.5)),
        ],
        values={
            "value": format_bytes(b.peak_bytes),
            "where": b.peak.where,
            "peak": format_bytes(b.peak.total_bytes),
            "overhead": format_bytes(b.overhead_bytes),
            "sum_value": format_bytes(sum_bytes),
        },
        lang_values={
            lang: {
                "phase": LABELS[lang].get(f"phase.{b.peak.phase}", b.peak.phase),
                "verdict": LABELS[lang][verdict_key],
            }
            for lang in Lang
        },
    )


def cheapest_fit_question(facts: ModelFacts) -> Draft:
    """The fitting strategy with the least added time, or "none fits"."""
    candidates = facts.strategies
    answer = cheapest_fit(candidates)

    def label(b: Breakdown) -> Choice:
        return Choice(*(strategy_label(b.options, lang) for lang in Lang))

    fitting = sorted(
        (b for b in candidates if b.fits), key=lambda b: (added_seconds(b), b.peak_bytes)
    )
    full_alone = next(
        b for b in candidates if b.options.recompute is Recompute.full and not b.options.offload
    )
    distractors = [label(full_alone)]
    distractors += [label(b) for b in candidates if not b.fits]
    distractors += [label(b) for b in fitting if b is not answer]
    if answer is None:
        correct = Choice.label("none_fits")
    else:
        correct = label(answer)
        distractors.append(Choice.label("none_fits"))

    # The next two distinct ways to fit (selective recompute under SDPA changes nothing, so it
    # would repeat the answer's numbers).
    next_cheapest: list[Breakdown] = []
    seen = {(added_seconds(answer), answer.peak_bytes)} if answer else set()
    for b in fitting:
        key = (added_seconds(b), b.peak_bytes)
        if key not in seen and len(next_cheapest) < 2:
            next_cheapest.append(b)
            seen.add(key)
    bodies = {}
    for lang in Lang:
        parts = TEMPLATES["cheapest-fit"][lang].parts
        words = LABELS[lang]
        values = _common(facts, lang) | {"base_peak": format_bytes(facts.base.peak_bytes)}
        if answer is facts.base:
            bodies[lang] = {"body": parts["already"].format(**values)}
            continue
        if answer is None:
            best = min(candidates, key=lambda b: b.peak_bytes)
            bodies[lang] = {
                "body": parts["none"].format(
                    **values,
                    best=strategy_label(best.options, lang),
                    best_peak=format_bytes(best.peak_bytes),
                )
            }
            continue
        others = [
            words["cost_item"].format(
                label=strategy_label(b.options, lang),
                peak=format_bytes(b.peak_bytes),
                cost=format_seconds(added_seconds(b)),
            )
            for b in next_cheapest
        ]
        bodies[lang] = {
            "body": parts["cheapest"].format(
                **values,
                answer=strategy_label(answer.options, lang),
                answer_peak=format_bytes(answer.peak_bytes),
                answer_cost=format_seconds(added_seconds(answer)),
                others=parts["others"].format(items=words["list_join"].join(others))
                if others
                else "",
                lesson=""
                if full_alone.fits
                else parts["lesson"].format(full_peak=format_bytes(full_alone.peak_bytes)),
            )
        }
    return Draft(
        correct,
        distractors,
        lang_values={lang: {"body": v["body"].strip()} for lang, v in bodies.items()},
    )


GENERATORS: dict[str, Callable[[ModelFacts], Draft]] = {
    "weights": weights,
    "optimizer-states": optimizer_states,
    "bytes-per-param": bytes_per_param,
    "dominant-component": dominant_component,
    "activations": activations,
    "full-recompute-saves": full_recompute_saves,
    "full-recompute-flops": full_recompute_flops,
    "sqrt-checkpoints": sqrt_checkpoints,
    "fits": fits,
    "cheapest-fit": cheapest_fit_question,
}
"""The generator of each kind in ``KINDS``."""
