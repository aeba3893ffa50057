"""Generated questions on fine-tuning with a frozen base: LoRA (Hu et al. 2021, as PEFT builds
it) and QLoRA (Dettmers et al. 2023, NF4 storage as bitsandbytes allocates it).

Each asks about the learner's model: with their own ``--lora-rank`` / ``--quantize`` when
they gave them, else LoRA r = 16 on PEFT's default targets and an NF4 base. Every number is
read from ``estimate`` of that setup (``ModelFacts.lora``, ``qlora``, ``full_tuning``) and
from the parameter tensors of its op graph (``ModelFacts.weights``). Left out for mixtures of
experts (see ``ModelFacts.lora_setup``) and when the learner's LoRA also trains whole modules
(``--train-embeddings``, ``--modules-to-save``), which these explanations do not cover.
"""

from __future__ import annotations

from dataclasses import replace

from memcalc.estimate import Options
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
from memcalc.quiz.facts import ModelFacts, WeightParts
from memcalc.quiz.figures import (
    Sum,
    choose_scale,
    far_apart,
    format_share,
    share_value,
)
from memcalc.quiz.kinds import both, sum_words
from memcalc.quiz.templates import LABELS, TEMPLATES
from memcalc.spec.families import family_of
from memcalc.spec.finetune import ALL_LINEAR, Quantize
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute


def _plain_lora(setup: TrainingSetup | None) -> bool:
    """A LoRA setup whose only trained tensors are the adapters."""
    lora = None if setup is None else setup.lora
    return lora is not None and not lora.train_embeddings and not lora.modules_to_save


def targets_text(f: ModelFacts, setup: TrainingSetup, lang: Lang) -> str:
    """The adapted modules as a prompt names them, e.g. ``q_proj, v_proj``."""
    assert setup.lora is not None
    targets = setup.lora.targets or family_of(f.spec).impl.lora_targets or ()
    if ALL_LINEAR in targets:
        return LABELS[lang]["lora.all_linear"]
    return ", ".join(targets)


def lora_words(f: ModelFacts, setup: TrainingSetup) -> dict[Lang, dict[str, str]]:
    """``rank``, ``targets``, ``quant`` and ``adapter_dtype`` of a LoRA setup, per language."""
    assert setup.lora is not None
    adapter = "fp32" if setup.lora.adapter_dtype.value == "fp32" else setup.weight_dtype.value
    return {
        lang: {
            "rank": str(setup.lora.rank),
            "targets": targets_text(f, setup, lang),
            "quant": setup.quantize.value,
            "adapter_dtype": adapter,
        }
        for lang in Lang
    }


def _merge(*parts: dict[Lang, dict[str, str]]) -> dict[Lang, dict[str, str]]:
    return {lang: {k: v for p in parts for k, v in p.get(lang, {}).items()} for lang in Lang}


def _share(fraction: float, mistake: str = "", **values: str) -> Choice:
    text = format_share(fraction)
    return Choice(text, text, value=share_value(text), mistake=mistake, values=values)


@question_kind(
    "lora-trainable",
    concept="lora-trains-few-parameters",
    topic=Topic.lora,
    difficulty=Difficulty.easy,
    variation=Variation.depth,
)
def lora_trainable(f: ModelFacts) -> Draft | None:
    """The share of all parameters (base + adapters) LoRA trains: r x (n_in + n_out) per
    adapted matrix, against the whole model."""
    b, setup = f.lora, f.lora_setup
    if b is None or setup is None or not _plain_lora(setup):
        return None
    lora = setup.lora
    assert lora is not None
    p = b.params
    value = p.trainable / p.total
    h = f.spec.hidden_size
    candidates: list[Choice] = []
    if ALL_LINEAR not in lora.targets:
        every = f.under(setup.replace(lora=replace(lora, targets=(ALL_LINEAR,))))
        if every is not None:
            candidates.append(
                _share(every.params.trainable / every.params.total, "lora.all_linear")
            )
    parts = f.weights(setup)
    layers = f.spec.num_layers
    candidates += [
        _share(lora.rank / h, "lora.rank_over_width", hidden=str(h)),
        _share(parts.lora_a_numel / p.total, "lora.a_only"),
        _share(p.trainable / layers / p.total, "lora.one_layer"),
    ]
    if b.parameter_bytes and parts.trained_bytes:
        candidates.append(_share(parts.trained_bytes / b.parameter_bytes, "lora.bytes_share"))
    candidates += [_share(1 - value, "lora.frozen_share"), _share(1.0, "lora.everything")]
    states = b.gradient_bytes + b.optimizer_bytes
    scale = choose_scale([states])
    adapter = parts.adapter
    values = {
        "trainable": f"{p.trainable:,}",
        "total": f"{p.total:,}",
        "frozen": f"{p.frozen:,}",
        "states": size_text(scale, states),
    }
    if adapter is not None:
        name, n_in, n_out = adapter
        values |= {
            "example": name,
            "n_in": str(n_in),
            "n_out": str(n_out),
            "per_matrix": f"{lora.rank * (n_in + n_out):,}",
        }

    def words(lang: Lang) -> dict[str, str]:
        part = "example" if adapter is not None else "no_example"
        fill = values | lora_words(f, setup)[lang]
        return {"example_sentence": TEMPLATES["lora-trainable"][lang].parts[part].format(**fill)}

    return Draft(
        _share(value),
        candidates,
        values=values,
        lang_values=_merge(lora_words(f, setup), both(words)),
        numeric=None,
    )


@question_kind(
    "lora-states",
    concept="lora-gradients-and-optimizer-shrink",
    topic=Topic.lora,
    difficulty=Difficulty.medium,
    variation=Variation.optimizer,
)
def lora_states(f: ModelFacts) -> Draft | None:
    """Gradients + optimizer states under LoRA: only the adapters have them (fp32 adapters
    under a -mixed recipe need no master copy)."""
    b, setup, full = f.lora, f.lora_setup, f.full_tuning
    if b is None or setup is None or full is None or not _plain_lora(setup):
        return None
    grads, opt = b.gradient_bytes, b.optimizer_bytes
    value = grads + opt
    if value == 0:
        return None
    full_states = full.gradient_bytes + full.optimizer_bytes
    master = b.optimizer_detail.master_weight_bytes
    # the frozen weights alone: the adapters (trained) are not among them
    frozen = b.parameter_bytes - f.weights(setup).trained_bytes
    total = Sum(((1, grads), (1, opt)), value)
    scale = choose_scale([value, grads, opt, master])
    large = choose_scale([full_states, frozen])
    shown = {
        "grads": size_text(scale, grads),
        "opt": size_text(scale, opt),
        "full": size_text(large, full_states),
        "weights": size_text(large, frozen),
        "master": size_text(scale, master),
    }
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (full_states, "lora.full_states", {}),
    ]
    mixed_no_master = setup.precision.is_mixed and master == 0 and opt > 0
    if mixed_no_master:
        candidates.append((value + 4 * b.params.trainable, "lora.master", {}))
    if grads and opt:
        candidates.append((opt, "lora.forgot_grads", {}))
    candidates += [
        (value + frozen, "lora.with_weights", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    master_key = "no_master" if mixed_no_master else "master" if master else "none"

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["lora-states"][lang].parts
        fill = shown | lora_words(f, setup)[lang] | {"precision": setup.precision.value}
        return {
            "sum": sum_words(scale, lang, total, ["term.gradients", "term.optimizer"]),
            "master_sentence": tpl[master_key].format(**fill),
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values=shown | {"trainable": f"{b.params.trainable:,}"},
        lang_values=_merge(lora_words(f, setup), both(words)),
        numeric=numeric_size(scale, value),
    )


@question_kind(
    "lora-activations",
    concept="lora-activations-do-not-shrink",
    topic=Topic.lora,
    difficulty=Difficulty.hard,
)
def lora_activations(f: ModelFacts) -> Draft | None:
    """Activations under LoRA next to full fine-tuning: they barely change, because the
    gradient still flows through every frozen layer to the adapters below."""
    b, setup, full = f.lora, f.lora_setup, f.full_tuning
    if b is None or setup is None or full is None or not _plain_lora(setup):
        return None
    value, full_acts = b.activation_bytes, full.activation_bytes
    fraction = b.params.trainable / b.params.total
    scaled = full_acts * fraction
    scale = choose_scale([value, full_acts, scaled])
    kbit = setup.prepared_for_kbit
    candidates: list[tuple[float, str, dict[str, str]]] = [
        (scaled, "lora.acts_scaled", {}),
        (full_acts, "lora.acts_kbit" if value > full_acts else "lora.acts_same", {}),
        (gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)}),
        *size_fallbacks(value),
    ]
    shown = {
        "full_acts": size_text(scale, full_acts),
        "share": format_share(fraction),
    }

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["lora-activations"][lang].parts
        fill = lora_words(f, setup)[lang]
        return {
            "kbit_sentence": tpl["kbit" if kbit else "plain"],
            "compared": tpl["more" if value > full_acts else "close"].format(
                value=size_text(scale, value, lang), full_acts=shown["full_acts"]
            ),
            "base_words": tpl["quantized_base"].format(**fill)
            if setup.quantize is not Quantize.none
            else "",
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values=shown,
        lang_values=_merge(lora_words(f, setup), both(words)),
        numeric=numeric_size(scale, value),
    )


_BYTES_PER_PARAM = {
    Quantize.nf4: "0.5625",
    Quantize.fp4: "0.5625",
    Quantize.nf4_dq: "0.516",
    Quantize.int8: "1",
}
"""Bytes per weight of each storage, as the explanation prints it (large matrices)."""


@question_kind(
    "qlora-base-bytes",
    concept="qlora-nf4-storage",
    topic=Topic.lora,
    difficulty=Difficulty.medium,
    variation=Variation.depth,
)
def qlora_base_bytes(f: ModelFacts) -> Draft | None:
    """Bytes of the quantized base weights, ``Quantize.storage_bytes`` of each: NF4 is 4-bit
    codes + an fp32 absmax per 64 weights (0.5 + 1/16 bytes) + a 64-byte code per tensor."""
    setup = f.qlora_setup
    if setup is None or f.qlora is None or not _plain_lora(setup):
        return None
    quant = setup.quantize
    parts = f.weights(setup)
    value, n = parts.quantized_bytes, parts.quantized_numel
    if not n:
        return None
    other = {q: parts.stored_as(q) for q in (Quantize.nf4, Quantize.nf4_dq, Quantize.int8)}
    sixteen = 2 * n
    candidates: list[tuple[float, str, dict[str, str]]] = []
    if quant in (Quantize.nf4, Quantize.fp4):
        candidates += [
            (n / 2, "qlora.forgot_absmax", {}),
            (sixteen, "qlora.as_16bit", {}),
            (other[Quantize.int8], "qlora.as_int8", {}),
            (other[Quantize.nf4_dq], "qlora.double_quant", {}),
        ]
    elif quant is Quantize.nf4_dq:
        candidates += [
            (other[Quantize.nf4], "qlora.single_quant", {}),
            (sixteen, "qlora.as_16bit", {}),
            (other[Quantize.int8], "qlora.as_int8", {}),
            (n / 2, "qlora.forgot_absmax", {}),
        ]
    else:  # int8
        candidates += [
            (other[Quantize.nf4], "qlora.as_nf4", {}),
            (sixteen, "qlora.as_16bit", {}),
        ]
    candidates += [(gb_read_as_gib(value), "gb_as_gib", {"gb": gb_text(value)})]
    candidates += size_fallbacks(value)
    others = parts.frozen_bytes - parts.frozen_routed_bytes
    scale = choose_scale([value, sixteen] + [x for x in (others, parts.frozen_routed_bytes) if x])
    shown = {
        "quantized": f"{n:,}",
        "tensors": str(parts.quantized_tensors),
        "per_param": _BYTES_PER_PARAM[quant],
        "sixteen": size_text(scale, sixteen),
        "frozen_b": size_text(scale, parts.frozen_bytes),
        "others_b": size_text(scale, others),
        "experts_b": size_text(scale, parts.frozen_routed_bytes),
    }
    storage = {Quantize.fp4: "nf4"}.get(quant, quant.value.replace("-", "_"))

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["qlora-base-bytes"][lang].parts
        fill = shown | lora_words(f, setup)[lang] | {"kinds": frozen_words(parts, lang)}
        unquantized = "unquantized_experts" if parts.frozen_routed_bytes else "unquantized"
        return {
            "storage_sentence": tpl[storage].format(**fill),
            "unquantized_sentence": tpl[unquantized].format(**fill) if parts.frozen_bytes else "",
        }

    return Draft(
        size(scale, value),
        readable_sizes(scale, candidates),
        values=shown,
        lang_values=_merge(lora_words(f, setup), both(words)),
        numeric=numeric_size(scale, value),
    )


_PARTS = ("base", "experts", "frozen", "adapters", "activations")
"""The parts of QLoRA memory the ``qlora-largest`` question compares (``experts``: a mixture
of experts' routed experts, which stay unquantized; absent for a dense model)."""


def frozen_words(parts: WeightParts, lang: Lang) -> str:
    """The frozen, unquantized tensors other than routed experts, in words (e.g.
    ``embeddings, norms, LM head``)."""
    words = LABELS[lang]
    return words["list_sep"].join(words[f"frozen.{k}"] for k in parts.frozen_kinds)


def experts_sentence(f: ModelFacts, parts: WeightParts, lang: Lang, size: str) -> str:
    """Why a mixture of experts' routed experts stay unquantized and frozen under QLoRA
    (empty for a dense model): their storage dtype is read from their bytes."""
    if not parts.frozen_routed_numel:
        return ""
    tpl = TEMPLATES["qlora-largest"][lang].parts
    itemsize = parts.frozen_routed_bytes // parts.frozen_routed_numel
    upcast = ""
    if itemsize == 4 and f.setup.weight_dtype.itemsize != 4:
        upcast = tpl["upcast"]
    return tpl["experts"].format(experts_b=size, upcast=upcast)


@question_kind(
    "qlora-largest",
    concept="qlora-memory-parts",
    topic=Topic.lora,
    difficulty=Difficulty.medium,
    variation=Variation.batch,
)
def qlora_largest(f: ModelFacts) -> Draft | None:
    """The largest of the quantized base, the routed experts (a mixture of experts: left
    unquantized), the other unquantized weights, the adapters with their gradients and
    optimizer states, and the activations (no recompute); left out when the two largest are
    within the margin."""
    b, setup = f.qlora, f.qlora_setup
    if b is None or setup is None or not _plain_lora(setup):
        return None
    parts = f.weights(setup)
    adapters = parts.trained_bytes + b.gradient_bytes + b.optimizer_bytes
    all_sizes = {
        "base": parts.quantized_bytes,
        "experts": parts.frozen_routed_bytes,
        "frozen": parts.frozen_bytes - parts.frozen_routed_bytes,
        "adapters": adapters,
        "activations": b.activation_bytes,
    }
    sizes = {name: v for name, v in all_sizes.items() if v}
    if len(sizes) < 4 or not all_sizes["base"]:
        return None
    ranked = sorted(sizes, key=lambda name: -sizes[name])
    largest = ranked[0]
    if not far_apart(sizes[largest], sizes[ranked[1]]):
        return None
    scale = choose_scale(sizes.values())
    shown = {name: size_text(scale, v) for name, v in sizes.items()}
    checkpointed = f.under(setup, Options(recompute=Recompute.full))
    words_of = lora_words(f, setup)

    def fill(lang: Lang) -> dict[str, str]:
        return words_of[lang] | {"kinds": frozen_words(parts, lang)}

    def part_label(name: str, lang: Lang) -> str:
        return LABELS[lang][f"qlora.{name}"].format(**fill(lang))

    def term(name: str, lang: Lang) -> str:
        return LABELS[lang][f"term.qlora.{name}"].format(**fill(lang))

    def option(name: str, mistake: str = "") -> Choice:
        return Choice(
            part_label(name, Lang.en),
            part_label(name, Lang.ur),
            mistake=mistake,
            values={"size": shown[name]},
            lang_values={
                lang: {"term": term(name, lang), "takes": LABELS[lang][f"takes.{name}"]}
                for lang in Lang
            },
        )

    def words(lang: Lang) -> dict[str, str]:
        tpl = TEMPLATES["qlora-largest"][lang].parts
        w = LABELS[lang]
        ckpt = (
            tpl["checkpointing"].format(
                checkpointed=size_text(scale, checkpointed.activation_bytes)
            )
            if checkpointed is not None
            else ""
        )
        listed = w["list_join"].join(
            w["part_size"].format(part=term(name, lang), size=shown[name]) for name in sizes
        )
        return {
            "parts": listed,
            "largest": part_label(largest, lang),
            "largest_term": term(largest, lang),
            "largest_takes": LABELS[lang][f"takes.{largest}"],
            "lesson": tpl[f"lesson.{largest}"],
            "experts_sentence": experts_sentence(f, parts, lang, shown.get("experts", "")),
            "checkpointing_sentence": ckpt,
        }

    return Draft(
        option(largest),
        [option(name, "qlora.smaller") for name in ranked[1:]],
        values={"largest_b": shown[largest]},
        lang_values=_merge(words_of, both(words)),
    )
