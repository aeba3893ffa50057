"""English and Urdu text of the questions generated from the learner's model.

Only words live here; every number is computed in ``kinds.py`` from ``estimate`` and filled in
with ``str.format``. Each template names the values it uses, so a translator can reorder them
freely. Numbers, units (GiB, MiB), dtypes and strategy names in code (``bf16-mixed``) stay in
Latin script in Urdu, as in the bank files; the terminal isolates them (``bidi.py``).

``MISTAKES`` holds what each distractor stands for: the sentence shown when a learner picks it.
The kinds of ``kinds_finetune.py``, ``kinds_parallel.py`` and ``kinds_moe.py`` keep their
words beside them in ``words_finetune.py``, ``words_parallel.py`` and ``words_moe.py``; they
are merged in here, so ``TEMPLATES``, ``MISTAKES`` and ``LABELS`` hold every kind.
"""

from __future__ import annotations

from memcalc.estimate import Options
from memcalc.quiz import words_finetune, words_moe, words_parallel, words_runtime
from memcalc.quiz.bank import Lang
from memcalc.quiz.template import Template
from memcalc.strategies.recompute import Recompute

__all__ = ["CONTEXT", "LABELS", "MISTAKES", "TEMPLATES", "Template", "strategy_label"]


CONTEXT: dict[Lang, str] = {
    Lang.en: "{model} (batch {batch}, sequence {seq}, {precision}, {optimizer}{extra})",
    Lang.ur: "{model} (بیچ {batch}، سیکوئنس {seq}، {precision}، {optimizer}{extra})",
}
"""How a prompt names the learner's setup (``extra``: the settings changed from the
defaults, e.g. eager attention)."""

LABELS: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "bytes_per_param": "{n} bytes",
        "parameters": "Parameters (the weights)",
        "gradients": "Gradients",
        "optimizer": "Optimizer states",
        "activations": "Activations saved for backward",
        "fits": "fits",
        "does_not_fit": "does not fit",
        "peak_verdict": "{value}: {verdict}",
        "recompute.selective": "selective recompute",
        "recompute.every-k": "sqrt(N) checkpointing (every {k} blocks)",
        "recompute.full": "full recompute",
        "offload.optimizer": "optimizer states to CPU",
        "offload.optimizer.nvme": "optimizer states to NVMe",
        "offload.activations": "activations to CPU",
        "offload.params": "parameters to CPU",
        "phrase.offload.optimizer": "optimizer states to CPU",
        "phrase.offload.optimizer.nvme": "optimizer states to NVMe",
        "phrase.offload.activations": "activations to CPU",
        "phrase.offload.params": "parameters to CPU",
        "phrase_join": " + ",
        "strategy_join": " + ",
        "nothing_needed": "Nothing: it already fits",
        "no_strategy": "no recompute or offload",
        "none_fits": "No recompute / offload combination makes it fit",
        "phase.forward": "forward",
        "phase.backward": "backward",
        "phase.optimizer step": "optimizer step",
        "list_join": "; ",
        "list_sep": ", ",
        "cost_item": "{label} ({peak}, +{cost})",
        "more_items": "and {n} more",
        "ctx.attention": "{attention} attention",
        "ctx.loss": "{loss} loss",
        "ctx.dropout": "dropout {dropout}",
        "ctx.grad_dtype": "{grad_dtype} gradients",
        "ctx.no_foreach": "per-tensor optimizer step",
        "every_k": "k = {k}",
        "every_k_line": "k = {k}: {worst}",
        "term.parameters": "weights",
        "term.gradients": "gradients",
        "term.optimizer": "optimizer states",
        "term.activations": "activations",
        "term.transient": "short-lived tensors",
        "term.overhead": "overhead",
        "term.tensors": "tensors",
        "moment_list": "{items} (each rounded), in all {sum}",
    },
    Lang.ur: {
        "bytes_per_param": "{n} بائٹس",
        "parameters": "پیرامیٹرز (ویٹس)",
        "gradients": "گریڈینٹس",
        "optimizer": "آپٹیمائزر اسٹیٹس",
        "activations": "بیک ورڈ کے لیے محفوظ ایکٹیویشنز",
        "fits": "فٹ ہو جاتی ہے",
        "does_not_fit": "فٹ نہیں ہوتی",
        "peak_verdict": "{value}: {verdict}",
        "recompute.selective": "سلیکٹو ری کمپیوٹ",
        "recompute.every-k": "sqrt(N) چیک پوائنٹنگ (ہر {k} بلاکس پر)",
        "recompute.full": "فل ری کمپیوٹ",
        "offload.optimizer": "آپٹیمائزر اسٹیٹس CPU پر",
        "offload.optimizer.nvme": "آپٹیمائزر اسٹیٹس NVMe پر",
        "offload.activations": "ایکٹیویشنز CPU پر",
        "offload.params": "پیرامیٹرز CPU پر",
        "phrase.offload.optimizer": "آپٹیمائزر اسٹیٹس CPU پر منتقل کرنے",
        "phrase.offload.optimizer.nvme": "آپٹیمائزر اسٹیٹس NVMe پر منتقل کرنے",
        "phrase.offload.activations": "ایکٹیویشنز CPU پر منتقل کرنے",
        "phrase.offload.params": "پیرامیٹرز CPU پر منتقل کرنے",
        "phrase_join": " اور ",
        "strategy_join": " + ",
        "nothing_needed": "کچھ نہیں: یہ پہلے ہی فٹ ہو جاتا ہے",
        "no_strategy": "بغیر ری کمپیوٹ یا آف لوڈ",
        "none_fits": "ری کمپیوٹ / آف لوڈ کا کوئی بھی امتزاج اسے فٹ نہیں کرتا",
        "phase.forward": "فارورڈ",
        "phase.backward": "بیک ورڈ",
        "phase.optimizer step": "آپٹیمائزر اسٹیپ",
        "list_join": "؛ ",
        "list_sep": "، ",
        "cost_item": "{label} ({peak}، +{cost})",
        "more_items": "اور {n} مزید",
        "ctx.attention": "{attention} اٹینشن",
        "ctx.loss": "{loss} لاس",
        "ctx.dropout": "ڈراپ آؤٹ {dropout}",
        "ctx.grad_dtype": "{grad_dtype} گریڈینٹس",
        "ctx.no_foreach": "ایک ایک ٹینسر والا آپٹیمائزر اسٹیپ",
        "every_k": "k = {k}",
        "every_k_line": "k = {k}: {worst}",
        "term.parameters": "ویٹس",
        "term.gradients": "گریڈینٹس",
        "term.optimizer": "آپٹیمائزر اسٹیٹس",
        "term.activations": "ایکٹیویشنز",
        "term.transient": "عارضی ٹینسرز",
        "term.overhead": "اوورہیڈ",
        "term.tensors": "ٹینسرز",
        "moment_list": "{items} (ہر ایک راؤنڈ شدہ)، کل ملا کر {sum}",
    },
}
"""Option labels and short words the generators combine."""


def strategy_phrase(options: Options, lang: Lang) -> str:
    """A strategy as a sentence says it was applied before something (Urdu: the oblique
    infinitive, ``آپٹیمائزر اسٹیٹس CPU پر منتقل کرنے`` + ``کے بعد بھی``); English: the label."""
    words = LABELS[lang]
    parts = []
    if options.recompute is not Recompute.none:
        parts.append(words[f"recompute.{options.recompute.value}"].format(k=options.every))
    parts += [
        words[f"phrase.offload.{o.what.value}" + (".nvme" if o.where.value == "nvme" else "")]
        for o in options.offload
    ]
    return words["phrase_join"].join(parts) if parts else words["no_strategy"]


def strategy_label(options: Options, lang: Lang) -> str:
    """A strategy in words, e.g. ``full recompute + optimizer states to CPU``."""
    words = LABELS[lang]
    parts = []
    if options.recompute is not Recompute.none:
        parts.append(words[f"recompute.{options.recompute.value}"].format(k=options.every))
    parts += [
        words[f"offload.{o.what.value}" + (".nvme" if o.where.value == "nvme" else "")]
        for o in options.offload
    ]
    return words["strategy_join"].join(parts) if parts else words["nothing_needed"]


TEMPLATES: dict[str, dict[Lang, Template]] = {
    "weights": {
        Lang.en: Template(
            prompt="{model} has {params} parameters. Under {precision} its weights are stored "
            "in {weight_dtype} ({weight_bytes} bytes each). How much GPU memory do the weights "
            "alone take?",
            explanation="{params} × {weight_bytes} bytes = {value_bytes} bytes = {value} "
            "(1 GiB = 2^30 bytes, 1 MiB = 2^20). The same bytes are {value_gb} in decimal GB "
            "(10^9 bytes). The weights are only one of the model states: the gradients add "
            "{grads} and the optimizer {optimizer_b}.",
        ),
        Lang.ur: Template(
            prompt="{model} میں {params} پیرامیٹرز ہیں۔ {precision} میں اس کے ویٹس {weight_dtype} "
            "میں رکھے جاتے ہیں (ہر ایک {weight_bytes} بائٹس)۔ صرف ویٹس GPU کی کتنی میموری "
            "لیتے ہیں؟",
            explanation="{params} × {weight_bytes} بائٹس = {value_bytes} بائٹس = {value} "
            "(1 GiB = 2^30 بائٹس، 1 MiB = 2^20)۔ یہی بائٹس ڈیسیمل GB (10^9 بائٹس) میں "
            "{value_gb} ہیں۔ ویٹس ماڈل اسٹیٹس کا صرف ایک حصہ ہیں: گریڈینٹس مزید {grads} "
            "لیتے ہیں اور آپٹیمائزر {optimizer_b}۔",
        ),
    },
    "optimizer-states": {
        Lang.en: Template(
            prompt="You train {model} ({params} parameters) with {optimizer} under {precision}. "
            "How much GPU memory does the optimizer hold between steps?",
            explanation="{state_sentence}{master_sentence}{step_sentence}Total on the GPU: "
            "{value}. Recompute and activation offload do not change this number; optimizer "
            "offload or ZeRO do.",
            parts={
                "states.none": "Plain SGD keeps no state. ",
                "states.one": "{optimizer} keeps one momentum buffer per parameter in "
                "{state_dtype}: {states}. ",
                "states.lion": "{optimizer} keeps one momentum buffer (exp_avg) per "
                "parameter in {state_dtype}: {states}. ",
                "states.two": "{optimizer} keeps two state tensors per parameter (exp_avg m "
                "and exp_avg_sq v) in {state_dtype}: {states}. ",
                "states.eight_bit": "{optimizer} keeps m and v in 8 bits, plus one fp32 "
                "absmax per 2048-element block (tensors under 4096 elements stay 32-bit): "
                "{states}. ",
                "states.factored": "{optimizer} keeps a factored second moment, one fp32 row "
                "and one column vector per matrix (full size for vectors): {states}. ",
                "master.mixed": "Under {precision} the optimizer also keeps an fp32 master "
                "copy of the weights: {master_params} × 4 bytes = {master}; {states} + {master} "
                "= {value_wo_step}. ",
                "master.mixed_only": "Under {precision} the optimizer keeps an fp32 master "
                "copy of the weights: {master_params} × 4 bytes = {master}. ",
                "master.none": "{precision} keeps no separate master copy: the optimizer "
                "updates the {state_dtype} weights themselves. ",
                "step.none": "",
                "step.counted": "This estimate also counts the {step_bytes} bytes of per-tensor "
                "step counters on the GPU, where PyTorch keeps them only for fused or "
                "capturable Adam. ",
                "step.host": "The {step_bytes} bytes of per-tensor step counters are not in "
                "it: PyTorch's default Adam/AdamW (neither fused nor capturable) keeps each "
                "step as a CPU tensor. ",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {model} ({params} پیرامیٹرز) کو {precision} میں {optimizer} کے ساتھ ٹرین "
            "کرتے ہیں۔ دو اسٹیپس کے درمیان آپٹیمائزر GPU کی کتنی میموری رکھتا ہے؟",
            explanation="{state_sentence}{master_sentence}{step_sentence}GPU پر کل: {value}۔ "
            "ری کمپیوٹ اور ایکٹیویشن آف لوڈ اس عدد کو نہیں بدلتے؛ آپٹیمائزر آف لوڈ یا ZeRO "
            "بدلتے ہیں۔",
            parts={
                "states.none": "سادہ SGD کوئی اسٹیٹ نہیں رکھتا۔ ",
                "states.one": "{optimizer} ہر پیرامیٹر کے لیے {state_dtype} میں ایک مومینٹم "
                "بفر رکھتا ہے: {states}۔ ",
                "states.lion": "{optimizer} ہر پیرامیٹر کے لیے {state_dtype} میں ایک مومینٹم "
                "بفر (exp_avg) رکھتا ہے: {states}۔ ",
                "states.two": "{optimizer} ہر پیرامیٹر کے لیے {state_dtype} میں دو اسٹیٹ ٹینسر "
                "(exp_avg یعنی m اور exp_avg_sq یعنی v) رکھتا ہے: {states}۔ ",
                "states.eight_bit": "{optimizer}، m اور v کو 8 بٹس میں رکھتا ہے، ساتھ ہر 2048 "
                "عناصر کے بلاک کا ایک fp32 absmax (4096 سے چھوٹے ٹینسر 32-bit رہتے ہیں): "
                "{states}۔ ",
                "states.factored": "{optimizer} فیکٹرڈ سیکنڈ مومنٹ رکھتا ہے، ہر میٹرکس کے لیے "
                "fp32 کی ایک رو اور ایک کالم ویکٹر (ویکٹرز کے لیے پورا سائز): {states}۔ ",
                "master.mixed": "{precision} میں آپٹیمائزر ویٹس کی fp32 ماسٹر کاپی بھی رکھتا "
                "ہے: {master_params} × 4 بائٹس = {master}؛ {states} + {master} = {value_wo_step}۔ ",
                "master.mixed_only": "{precision} میں آپٹیمائزر ویٹس کی fp32 ماسٹر کاپی رکھتا "
                "ہے: {master_params} × 4 بائٹس = {master}۔ ",
                "master.none": "{precision} میں کوئی الگ ماسٹر کاپی نہیں ہوتی: آپٹیمائزر "
                "{state_dtype} ویٹس کو ہی اپڈیٹ کرتا ہے۔ ",
                "step.none": "",
                "step.counted": "یہ تخمینہ ہر ٹینسر کے step کاؤنٹرز کے {step_bytes} بائٹس بھی "
                "GPU پر گنتا ہے، جہاں PyTorch انہیں صرف fused یا capturable Adam میں رکھتا ہے۔ ",
                "step.host": "ہر ٹینسر کے step کاؤنٹرز کے {step_bytes} بائٹس اس میں شامل نہیں: "
                "PyTorch کا ڈیفالٹ Adam/AdamW (نہ fused نہ capturable) ہر step کو CPU ٹینسر "
                "کے طور پر رکھتا ہے۔ ",
            },
        ),
    },
    "bytes-per-param": {
        Lang.en: Template(
            prompt="Counting weights, gradients and optimizer states{prompt_states}, how many "
            "bytes per parameter does training {model} with {optimizer} under {precision} "
            "take?",
            explanation="Weights {w} ({weight_dtype}) + gradients {g} ({grad_dtype}) + "
            "optimizer {o} = {n} bytes per parameter. {optimizer_sentence}{recipe_sentence}"
            "{reference_sentence}For {model}: {n} × {params} {approx} {total}, before a single "
            "activation.",
            parts={
                "with_master": " (fp32 master weights included)",
                "no_master": "",
                "share": "The optimizer's share is {share}. ",
                "with_master_share": "an fp32 master copy of the weights (4) plus {states}",
                "states.sgd": "no state at all: plain SGD updates with the gradient alone (0)",
                "states.sgd-momentum": "one momentum buffer in {state_dtype} ({s})",
                "states.lion": "one momentum buffer (exp_avg) in {state_dtype} ({s})",
                "states.adam": "m and v (exp_avg, exp_avg_sq) in {state_dtype} ({s})",
                "states.adamw": "m and v (exp_avg, exp_avg_sq) in {state_dtype} ({s})",
                "states.adamw-8bit": "m and v in 8 bits, 1 byte each, with a 4-byte absmax per "
                "2048 elements (tensors under 4096 elements keep 32-bit states) ({s})",
                "states.adafactor": "a factored second moment, one fp32 row and one column "
                "vector per matrix and nothing else ({s})",
                "mixed": "",
                "amp": "torch.autocast computes the matmuls in 16-bit but keeps weights, "
                "gradients and states in fp32: nothing else is stored per parameter. ",
                "fp32": "fp32 training updates the fp32 weights directly: nothing else is stored "
                "per parameter. ",
                "pure16": "Pure 16-bit training updates the {weight_dtype} weights themselves: "
                "half of fp32's bytes, but updates below the format's precision are lost. ",
                "counts": "Megatron-LM's 18 is this recipe with fp32 gradients; the ZeRO paper's "
                "16 (2 + 2 + 12) has 16-bit gradients; 20 is 16-bit gradients plus an fp32 copy "
                "of them (Megatron-LM with float16 gradients); forgetting the master weights "
                "gives 4 fewer. ",
            },
        ),
        Lang.ur: Template(
            prompt="ویٹس، گریڈینٹس اور آپٹیمائزر اسٹیٹس{prompt_states} گن کر، {model} کو "
            "{precision} میں {optimizer} کے ساتھ ٹرین کرنے پر فی پیرامیٹر کتنے بائٹس لگتے ہیں؟",
            explanation="ویٹس {w} ({weight_dtype}) + گریڈینٹس {g} ({grad_dtype}) + آپٹیمائزر "
            "{o} = فی پیرامیٹر {n} بائٹس۔ {optimizer_sentence}{recipe_sentence}"
            "{reference_sentence}{model} کے لیے: {n} × {params} {approx} {total}، ایک بھی "
            "ایکٹیویشن سے پہلے۔",
            parts={
                "with_master": " (fp32 ماسٹر ویٹس سمیت)",
                "no_master": "",
                "share": "آپٹیمائزر کے حصے میں {share} ہیں۔ ",
                "with_master_share": "ویٹس کی fp32 ماسٹر کاپی (4) اور {states}",
                "states.sgd": "کوئی اسٹیٹ نہیں: سادہ SGD صرف گریڈینٹ سے اپڈیٹ کرتا ہے (0)",
                "states.sgd-momentum": "{state_dtype} میں ایک مومینٹم بفر ({s})",
                "states.lion": "{state_dtype} میں ایک مومینٹم بفر (exp_avg) ({s})",
                "states.adam": "{state_dtype} میں m اور v (exp_avg اور exp_avg_sq) ({s})",
                "states.adamw": "{state_dtype} میں m اور v (exp_avg اور exp_avg_sq) ({s})",
                "states.adamw-8bit": "8 بٹس میں m اور v، ہر ایک 1 بائٹ، ہر 2048 عناصر پر "
                "4 بائٹس کے ایک absmax کے ساتھ (4096 سے چھوٹے ٹینسرز کی اسٹیٹس 32-bit رہتی ہیں) "
                "({s})",
                "states.adafactor": "فیکٹرڈ سیکنڈ مومنٹ، ہر میٹرکس کے لیے fp32 کی ایک رو اور "
                "ایک کالم ویکٹر، اور کچھ نہیں ({s})",
                "mixed": "",
                "amp": "torch.autocast میٹرکس ضربیں 16-bit میں کرتا ہے مگر ویٹس، گریڈینٹس اور "
                "اسٹیٹس fp32 میں رکھتا ہے: فی پیرامیٹر اس کے علاوہ کچھ محفوظ نہیں ہوتا۔ ",
                "fp32": "fp32 ٹریننگ fp32 ویٹس کو براہِ راست اپڈیٹ کرتی ہے: فی پیرامیٹر اس کے "
                "علاوہ کچھ محفوظ نہیں ہوتا۔ ",
                "pure16": "خالص 16-bit ٹریننگ {weight_dtype} ویٹس کو ہی اپڈیٹ کرتی ہے: fp32 کے "
                "آدھے بائٹس، مگر فارمیٹ کی پریسیژن سے چھوٹے اپڈیٹس ضائع ہو جاتے ہیں۔ ",
                "counts": "Megatron-LM کے 18 بائٹس یہی طریقہ ہیں، fp32 گریڈینٹس کے ساتھ؛ ZeRO "
                "پیپر کے 16 بائٹس (2 + 2 + 12) میں گریڈینٹس 16-bit ہیں؛ 20 بائٹس 16-bit "
                "گریڈینٹس اور ان کی ایک fp32 کاپی سے بنتے ہیں (float16 گریڈینٹس کے ساتھ "
                "Megatron-LM)؛ ماسٹر ویٹس بھول جانے سے 4 کم۔ ",
            },
        ),
    },
    "dominant-component": {
        Lang.en: Template(
            prompt="Without recompute or offload, which of the four memory components is the "
            "largest when training {ctx}?",
            explanation="Parameters {params_b}, gradients {grads_b}, optimizer states {opt_b}, "
            "activations {acts_b}. Largest: {largest} ({largest_b}). Activations grow with "
            "batch × sequence ({tokens} tokens here); the other three grow only with the "
            "parameter count.",
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ یا آف لوڈ کے بغیر، {ctx} کی ٹریننگ میں میموری کے چار حصوں میں "
            "سب سے بڑا کون سا ہے؟",
            explanation="پیرامیٹرز {params_b}، گریڈینٹس {grads_b}، آپٹیمائزر اسٹیٹس {opt_b}، "
            "ایکٹیویشنز {acts_b}۔ سب سے بڑا حصہ: {largest} ({largest_b})۔ ایکٹیویشنز بیچ × "
            "سیکوئنس کے ساتھ بڑھتی ہیں (یہاں {tokens} ٹوکنز)؛ باقی تین صرف پیرامیٹرز کی "
            "تعداد کے ساتھ بڑھتے ہیں۔",
        ),
    },
    "activations": {
        Lang.en: Template(
            prompt="Without recompute, how much activation memory does training {ctx} keep on "
            "the GPU from the forward pass to the backward pass?",
            explanation="{blocks_sentence}; the embedding, the LM head and the loss keep "
            "{outside} more: {sum}. One block's share ({per_block}) is not the model's. With "
            "full recompute it would be {full_value}, not zero: the block inputs and the "
            "loss's tensors stay.",
            parts={
                "blocks.uniform": "Each of the {layers} blocks saves {per_block}: {product}",
                "blocks.varied": "The {layers} blocks save {in_blocks} together",
            },
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ کے بغیر، {ctx} کی ٹریننگ فارورڈ پاس سے بیک ورڈ پاس تک GPU پر "
            "کتنی ایکٹیویشن میموری رکھتی ہے؟",
            explanation="{blocks_sentence}؛ ایمبیڈنگ، LM ہیڈ اور لاس مزید {outside} رکھتے "
            "ہیں: {sum}۔ ایک بلاک کا حصہ ({per_block}) پورے ماڈل کا نہیں۔ فل ری کمپیوٹ کے "
            "ساتھ یہ {full_value} ہوتی، صفر نہیں: بلاکس کے ان پٹ اور لاس کے ٹینسرز رہتے ہیں۔",
            parts={
                "blocks.uniform": "{layers} بلاکس میں سے ہر ایک {per_block} محفوظ کرتا ہے: "
                "{product}",
                "blocks.varied": "{layers} بلاکس مل کر {in_blocks} محفوظ کرتے ہیں",
            },
        ),
    },
    "full-recompute-saves": {
        Lang.en: Template(
            prompt="Switching {ctx} from no recompute to full recompute (each block keeps only "
            "its input), how much activation memory do you save?",
            explanation="No recompute keeps {none_value}; full recompute keeps {full_value} "
            "(the {layers} block inputs plus the tensors outside the blocks, such as the "
            "loss's). Saved: {difference}. In backward one block is rebuilt at a time, adding "
            "{rebuild} for a moment.",
        ),
        Lang.ur: Template(
            prompt="{ctx} کو بغیر ری کمپیوٹ سے فل ری کمپیوٹ (ہر بلاک صرف اپنا ان پٹ رکھتا ہے) پر "
            "لے جانے سے کتنی ایکٹیویشن میموری بچتی ہے؟",
            explanation="بغیر ری کمپیوٹ کے {none_value} رہتی ہے؛ فل ری کمپیوٹ {full_value} رکھتا "
            "ہے ({layers} بلاکس کے ان پٹ اور بلاکس سے باہر کے ٹینسرز، جیسے لاس کے)۔ بچت: "
            "{difference}۔ بیک ورڈ میں ایک وقت میں ایک بلاک دوبارہ بنتا ہے، جو لمحہ بھر کے لیے "
            "{rebuild} بڑھاتا ہے۔",
        ),
    },
    "full-recompute-flops": {
        Lang.en: Template(
            prompt="Full recompute runs each block's forward a second time during backward. By "
            "how much does it increase the FLOPs of one training step of {ctx}?",
            explanation="A step is about forward + backward = 3 × forward = {step_flops} "
            "(backward ≈ 2 × forward). Recompute adds {extra}: one more forward of the "
            "{layers} blocks, but not of the embedding, the LM head and the loss. That is "
            "{value} of the step ({of_forward} of the forward alone), about {extra_time} per "
            "step on {gpu} at {mfu} MFU. {textbook_sentence}",
            parts={
                "close": "That is close to the textbook +33%, which assumes the whole forward "
                "is replayed: here the blocks are {of_forward} of the forward.",
                "far": "The textbook +33% assumes the whole forward is replayed; here the "
                "embedding, the LM head and the loss are {outside_share} of the forward and "
                "are not, so the real figure is {value}.",
            },
        ),
        Lang.ur: Template(
            prompt="فل ری کمپیوٹ بیک ورڈ کے دوران ہر بلاک کا فارورڈ دوسری بار چلاتا ہے۔ اس سے "
            "{ctx} کے ایک ٹریننگ اسٹیپ کے FLOPs کتنے بڑھ جاتے ہیں؟",
            explanation="ایک اسٹیپ تقریباً فارورڈ + بیک ورڈ = 3 × فارورڈ = {step_flops} ہے "
            "(بیک ورڈ ≈ 2 × فارورڈ)۔ ری کمپیوٹ {extra} بڑھاتا ہے: {layers} بلاکس کا ایک اور "
            "فارورڈ، مگر ایمبیڈنگ، LM ہیڈ اور لاس کا نہیں۔ یہ اسٹیپ کا {value} ہے (صرف فارورڈ "
            "کا {of_forward})، یعنی {gpu} پر {mfu} MFU سے فی اسٹیپ تقریباً {extra_time}۔ "
            "{textbook_sentence}",
            parts={
                "close": "یہ نصابی +33% کے قریب ہے، جو یہ مانتا ہے کہ پورا فارورڈ دوبارہ چلتا "
                "ہے: یہاں بلاکس فارورڈ کا {of_forward} ہیں۔",
                "far": "نصابی +33% یہ مانتا ہے کہ پورا فارورڈ دوبارہ چلتا ہے؛ یہاں ایمبیڈنگ، "
                "LM ہیڈ اور لاس فارورڈ کا {outside_share} ہیں اور دوبارہ نہیں چلتے، اس لیے "
                "اصل عدد {value} ہے۔",
            },
        ),
    },
    "sqrt-checkpoints": {
        Lang.en: Template(
            prompt="{model} has N = {layers} blocks. With sqrt(N) checkpointing (Chen et al. "
            "2016), how many block inputs does the forward pass keep as checkpoints?",
            explanation="Segments of k = round(sqrt({layers})) = {k} blocks, one checkpoint "
            "per segment: ceil({layers} / {k}) = {value}. For {ctx} that keeps {sqrt_acts} of "
            "activations instead of {full_acts} with full recompute (one checkpoint per "
            "block), for the same one extra forward; in backward a whole segment of {k} "
            "blocks is rebuilt at once ({rebuild}).",
        ),
        Lang.ur: Template(
            prompt="{model} میں N = {layers} بلاکس ہیں۔ sqrt(N) چیک پوائنٹنگ (Chen et al. 2016) "
            "کے ساتھ فارورڈ پاس کتنے بلاک ان پٹس کو چیک پوائنٹ کے طور پر رکھتا ہے؟",
            explanation="k = round(sqrt({layers})) = {k} بلاکس کے سیگمنٹ، ہر سیگمنٹ کا ایک "
            "چیک پوائنٹ: ceil({layers} / {k}) = {value}۔ {ctx} کے لیے اس سے {sqrt_acts} "
            "ایکٹیویشنز رہتی ہیں، جبکہ فل ری کمپیوٹ (ہر بلاک کا ایک چیک پوائنٹ) میں {full_acts}، "
            "اور اضافی لاگت وہی ایک فارورڈ ہے؛ بیک ورڈ میں {k} بلاکس کا پورا سیگمنٹ ایک ساتھ "
            "دوبارہ بنتا ہے ({rebuild})۔",
        ),
    },
    "sqrt-flops": {
        Lang.en: Template(
            prompt="Training {ctx} with sqrt(N) checkpointing keeps a checkpoint every k = "
            "{k} blocks: {checkpoints} checkpoints for {layers} blocks. By how much does it "
            "increase the FLOPs of one training step?",
            explanation="In backward each segment is rebuilt once from the checkpoint at its "
            "start, and its {k} blocks' backward then use the rebuilt tensors: every block's "
            "forward runs once more, {extra} in all, {value} of the step: the same as full "
            "recompute ({full_pct}). The two differ in memory: at backward's worst moment "
            "sqrt(N) holds {sqrt_worst} of activations, full recompute {full_worst}, no "
            "recompute {none_acts}. {memory_sentence}",
            parts={
                "full_lighter": "Here full recompute is the lighter one: a block saves much "
                "more than its input, so rebuilding {k} blocks at once costs more than keeping "
                "every block's input (Chen et al.'s sqrt(N) assumes layers whose saved "
                "tensors are as small as their inputs).",
                "sqrt_lighter": "Here sqrt(N) is the lighter one: it keeps only "
                "{checkpoints} block inputs and rebuilds {k} blocks at a time (Chen et al. "
                "2016).",
            },
        ),
        Lang.ur: Template(
            prompt="sqrt(N) چیک پوائنٹنگ کے ساتھ {ctx} کی ٹریننگ ہر k = {k} بلاکس پر ایک چیک "
            "پوائنٹ رکھتی ہے: {layers} بلاکس کے لیے {checkpoints} چیک پوائنٹس۔ اس سے ایک "
            "ٹریننگ اسٹیپ کے FLOPs کتنے بڑھتے ہیں؟",
            explanation="بیک ورڈ میں ہر سیگمنٹ اپنے شروع کے چیک پوائنٹ سے ایک بار دوبارہ بنتا "
            "ہے، اور پھر اس کے {k} بلاکس کا بیک ورڈ انہی دوبارہ بنے ٹینسرز سے چلتا ہے: ہر بلاک "
            "کا فارورڈ ایک بار مزید چلتا ہے، کل {extra}، یعنی اسٹیپ کا {value}: اتنا ہی جتنا فل "
            "ری کمپیوٹ ({full_pct})۔ فرق میموری میں ہے: بیک ورڈ میں میموری کے عروج (پیک) پر "
            "sqrt(N) {sqrt_worst} ایکٹیویشنز رکھتی ہے، فل ری کمپیوٹ {full_worst}، اور ری "
            "کمپیوٹ کے بغیر {none_acts}۔ {memory_sentence}",
            parts={
                "full_lighter": "یہاں فل ری کمپیوٹ ہلکا ہے: ایک بلاک اپنے ان پٹ سے کہیں زیادہ "
                "محفوظ کرتا ہے، اس لیے ایک ساتھ {k} بلاکس دوبارہ بنانا ہر بلاک کا ان پٹ رکھنے "
                "سے مہنگا پڑتا ہے (Chen et al. کا sqrt(N) ان لیئرز کے لیے ہے جن کے محفوظ ٹینسرز "
                "ان کے ان پٹ جتنے چھوٹے ہوں)۔",
                "sqrt_lighter": "یہاں sqrt(N) ہلکی ہے: یہ صرف {checkpoints} بلاک ان پٹ رکھتی "
                "ہے اور ایک وقت میں {k} بلاکس دوبارہ بناتی ہے (Chen et al. 2016)۔",
            },
        ),
    },
    "every-k-peak": {
        Lang.en: Template(
            prompt="Training {ctx} with a checkpoint every k = {every} blocks (--recompute "
            "every-k --every {every}): the forward keeps {segments} segment inputs, and "
            "backward rebuilds one segment of {every} blocks at a time. How much activation "
            "memory is alive at the worst moment of backward?",
            explanation="What the forward keeps (the {segments} checkpoints and the tensors "
            "outside the blocks) plus the segment being rebuilt ({every} blocks of {block} "
            "each, less its checkpointed input, which is already kept): {sum}. Larger k keeps "
            "fewer checkpoints but rebuilds more at once.",
        ),
        Lang.ur: Template(
            prompt="{ctx} کو ہر k = {every} بلاکس پر ایک چیک پوائنٹ کے ساتھ ٹرین کرتے ہوئے "
            "(--recompute every-k --every {every}): فارورڈ {segments} سیگمنٹس کے ان پٹ رکھتا "
            "ہے، اور بیک ورڈ ایک وقت میں {every} بلاکس کا ایک سیگمنٹ دوبارہ بناتا ہے۔ بیک ورڈ "
            "میں میموری کے عروج (پیک) پر کتنی ایکٹیویشن میموری موجود ہوتی ہے؟",
            explanation="فارورڈ جو رکھتا ہے ({segments} چیک پوائنٹس اور بلاکس سے باہر کے "
            "ٹینسرز) اور دوبارہ بنتا سیگمنٹ ({every} بلاکس، ہر ایک {block}، سوائے اس چیک "
            "پوائنٹ ان پٹ کے جو پہلے ہی رکھا ہوا ہے): {sum}۔ بڑا k کم چیک پوائنٹس رکھتا ہے "
            "مگر ایک ساتھ زیادہ دوبارہ بناتا ہے۔",
        ),
    },
    "every-k-best": {
        Lang.en: Template(
            prompt="{model} has N = {layers} blocks. Each block saves {block} without "
            "recompute, and its input is {input}. Checkpointing every k blocks keeps ceil(N/k) "
            "block inputs and rebuilds one segment of k blocks at a time in backward. For "
            "{ctx}, which k gives the least activation memory at the worst moment of "
            "backward (kept + rebuilt)?",
            explanation="At the worst moment of backward (kept + rebuilt): {lines}. Fewer "
            "checkpoints save block inputs, but every extra block in a segment costs a whole "
            "block's activations at once, so the best k is near sqrt(N × input / block) = "
            "sqrt({layers} × {input} / {block}) ≈ {k_star}, not sqrt(N): k = {best} "
            "({best_worst}).",
        ),
        Lang.ur: Template(
            prompt="{model} میں N = {layers} بلاکس ہیں۔ ری کمپیوٹ کے بغیر ہر بلاک {block} محفوظ "
            "کرتا ہے، اور اس کا ان پٹ {input} ہے۔ ہر k بلاکس پر چیک پوائنٹ رکھنے سے ceil(N/k) "
            "بلاک ان پٹس رہتے ہیں اور بیک ورڈ میں ایک وقت میں k بلاکس کا ایک سیگمنٹ دوبارہ "
            "بنتا ہے۔ {ctx} کے لیے کون سا k بیک ورڈ میں میموری کے عروج (پیک) پر (رکھی گئی + "
            "دوبارہ بنی) سب سے کم ایکٹیویشن میموری دیتا ہے؟",
            explanation="بیک ورڈ میں میموری کے عروج (پیک) پر (رکھی گئی + دوبارہ بنی): {lines}۔ "
            "کم چیک پوائنٹس بلاک ان پٹس بچاتے ہیں، مگر سیگمنٹ کا ہر اضافی بلاک ایک ساتھ "
            "پورے بلاک کی ایکٹیویشنز لیتا ہے، اس لیے بہترین k تقریباً sqrt(N × input / block) = "
            "sqrt({layers} × {input} / {block}) ≈ {k_star} کے قریب ہوتا ہے، sqrt(N) نہیں: "
            "k = {best} ({best_worst})۔",
        ),
    },
    "fits": {
        Lang.en: Template(
            prompt="Training {ctx} on one {gpu} ({gpu_memory}) without recompute or offload: "
            "the weights take {params_b}, the gradients {grads_b}, the optimizer states "
            "{opt_b} and the activations saved for backward {acts_b}; {temps_sentence}; and "
            "the GPU profile assumes {overhead} of runtime overhead (CUDA context and library "
            "workspaces). What is the estimated peak of one step, and does it fit?",
            explanation="The peak is the largest moment of the step, not the sum of the four "
            "components: here it comes in the {phase} phase ({where}): {moment}. Against "
            "the {usable} usable on {gpu} ({gpu_memory} less the {reserve} memcalc keeps free "
            "for the caching allocator's cache and fragmentation, --headroom), it {verdict}. "
            "Adding all four components and the overhead would give {sum_value}.",
            parts={
                "temps.foreach": "the optimizer step allocates {temps} of temporaries "
                "(foreach: one state-sized buffer for all parameters at once)",
                "temps.single": "the optimizer step allocates {temps} of temporaries (one "
                "tensor at a time: the largest tensor's)",
                "temps.none": "the optimizer step allocates no temporaries",
            },
        ),
        Lang.ur: Template(
            prompt="{ctx} کو ایک {gpu} ({gpu_memory}) پر ری کمپیوٹ یا آف لوڈ کے بغیر ٹرین "
            "کرتے ہوئے: ویٹس {params_b} لیتے ہیں، گریڈینٹس {grads_b}، آپٹیمائزر اسٹیٹس "
            "{opt_b} اور بیک ورڈ کے لیے محفوظ ایکٹیویشنز {acts_b}؛ {temps_sentence}؛ اور GPU "
            "پروفائل {overhead} رن ٹائم اوورہیڈ (CUDA کانٹیکسٹ اور لائبریری ورک اسپیسز) فرض "
            "کرتا ہے۔ ایک اسٹیپ کی متوقع پیک کتنی ہے، اور کیا یہ فٹ ہوتی ہے؟",
            explanation="پیک اسٹیپ کا سب سے بھاری لمحہ ہے، چار حصوں کا مجموعہ نہیں: یہاں یہ "
            "{phase} مرحلے میں ({where}) آتی ہے: {moment}۔ {gpu} کی {gpu_memory} میں سے memcalc "
            "کیشنگ ایلوکیٹر کے کیش اور فریگمنٹیشن کے لیے {reserve} خالی رکھتا ہے (--headroom)؛ "
            "قابلِ استعمال {usable} کے مقابلے میں یہ {verdict}۔ چاروں حصے اور اوورہیڈ جمع کرنے سے "
            "{sum_value} بنتا۔",
            parts={
                "temps.foreach": "آپٹیمائزر اسٹیپ {temps} کے عارضی ٹینسرز بناتا ہے (foreach: "
                "تمام پیرامیٹرز کے لیے ایک ساتھ ایک اسٹیٹ جتنا بفر)",
                "temps.single": "آپٹیمائزر اسٹیپ {temps} کے عارضی ٹینسرز بناتا ہے (ایک وقت "
                "میں ایک ٹینسر: سب سے بڑے ٹینسر جتنا)",
                "temps.none": "آپٹیمائزر اسٹیپ کوئی عارضی ٹینسر نہیں بناتا",
            },
        ),
    },
    "cheapest-fit": {
        Lang.en: Template(
            prompt="What is the cheapest way to make training {ctx} fit on one {gpu} "
            "({gpu_memory}, of which {overhead} is runtime overhead), among the strategies "
            "memcalc estimate compares ({strategies})? Cheapest means the least time added per "
            "step: recompute FLOPs at {mfu} MFU, the offload transfers compute cannot hide, and "
            "the optimizer step on the CPU when the optimizer is offloaded. Fitting means a "
            "peak within {usable} ({reserve} kept free for the caching allocator's cache and "
            "fragmentation) and what is offloaded within the node's host RAM and NVMe. When "
            "two strategies add the same time, the simpler one, then the one with the lower "
            "peak, counts as cheaper.",
            explanation="{body}",
            parts={
                "already": "Without any strategy the peak is {base_peak}, within the {usable} "
                "usable: nothing is needed, and every strategy would only add time.",
                "cheapest": "Without any strategy the peak is {base_peak}, over the {usable} "
                "usable. The cheapest that fits is {answer} ({answer_peak}, +{answer_cost} per "
                "step). {others}{lesson}",
                "others": "Next cheapest: {items}. ",
                "lesson": "Recompute alone is not enough: full recompute still peaks at "
                "{full_peak}, because it does not touch parameters, gradients or optimizer "
                "states.",
                "none": "Without any strategy the peak is {base_peak}; even {best} peaks at "
                "{best_peak}, over the {usable} usable: none of these strategies fits.",
                "none_host": "Without any strategy the peak is {base_peak}; {best} would fit "
                "the GPU ({best_peak}) but needs {host} of host RAM per node, more than the "
                "node's {host_memory}: none of these strategies fits.",
                "advice": "Shard the model states across GPUs (ZeRO/FSDP, memcalc plan searches "
                "the layouts) or use a larger GPU; the micro-batch is already 1.",
                "advice_batch": "Shard the model states across GPUs (ZeRO/FSDP, memcalc plan "
                "searches the layouts), use a smaller micro-batch, or use a larger GPU.",
                "ties": "About the same time, so not among the options: {items}.",
            },
        ),
        Lang.ur: Template(
            prompt="{ctx} کی ٹریننگ کو ایک {gpu} ({gpu_memory}، جس میں {overhead} رن ٹائم "
            "اوورہیڈ ہے) پر فٹ کرنے کا سب سے سستا طریقہ کون سا ہے، ان طریقوں میں سے جن کا "
            "memcalc estimate موازنہ کرتا ہے ({strategies})؟ سب سے سستا یعنی فی اسٹیپ سب سے کم "
            "اضافی وقت: {mfu} MFU پر ری کمپیوٹ کے FLOPs، وہ آف لوڈ ٹرانسفرز جنہیں کمپیوٹ چھپا نہیں "
            "سکتا، اور آپٹیمائزر آف لوڈ ہونے پر CPU پر آپٹیمائزر اسٹیپ۔ فٹ ہونے کا مطلب ہے پیک "
            "{usable} کے اندر ({reserve} کیشنگ ایلوکیٹر کے کیش اور فریگمنٹیشن کے لیے خالی رکھ "
            "کر)، اور جو آف لوڈ ہو وہ نوڈ کی ہوسٹ RAM اور NVMe میں سما جائے۔ اگر دو طریقے برابر "
            "وقت بڑھائیں تو سادہ تر، اور پھر کم پیک والا، سستا مانا جاتا ہے۔",
            explanation="{body}",
            parts={
                "already": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے، جو قابلِ استعمال "
                "{usable} کے اندر ہے: کچھ کرنے کی ضرورت نہیں، اور ہر حکمتِ عملی صرف وقت بڑھائے گی۔",
                "cheapest": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے، جو قابلِ استعمال {usable} "
                "سے زیادہ ہے۔ فٹ ہونے والا سب سے سستا طریقہ {answer} ہے ({answer_peak}، فی اسٹیپ "
                "+{answer_cost})۔ {others}{lesson}",
                "others": "اس کے بعد سستے: {items}۔ ",
                "lesson": "صرف ری کمپیوٹ کافی نہیں: فل ری کمپیوٹ کے ساتھ بھی پیک {full_peak} ہے، "
                "کیونکہ یہ پیرامیٹرز، گریڈینٹس اور آپٹیمائزر اسٹیٹس کو نہیں چھوتا۔",
                "none": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے؛ {best_after} کے بعد بھی پیک "
                "{best_peak} ہے، جو قابلِ استعمال {usable} سے زیادہ ہے: ان میں سے کوئی طریقہ فٹ "
                "نہیں ہوتا۔",
                "none_host": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے؛ {best_after} کے بعد یہ "
                "GPU پر فٹ ہو جاتا ({best_peak}) مگر اسے فی نوڈ {host} ہوسٹ RAM چاہیے، جو "
                "نوڈ کی {host_memory} سے زیادہ ہے: ان میں سے کوئی طریقہ فٹ نہیں ہوتا۔",
                "advice": "ماڈل اسٹیٹس کو کئی GPUs میں شارڈ کریں (ZeRO/FSDP؛ memcalc plan لے آؤٹس "
                "تلاش کرتا ہے) یا بڑا GPU لیں؛ مائیکرو بیچ پہلے ہی 1 ہے۔",
                "advice_batch": "ماڈل اسٹیٹس کو کئی GPUs میں شارڈ کریں (ZeRO/FSDP؛ memcalc plan "
                "لے آؤٹس تلاش کرتا ہے)، مائیکرو بیچ چھوٹا کریں، یا بڑا GPU لیں۔",
                "ties": "تقریباً اتنا ہی وقت، اس لیے آپشنز میں شامل نہیں: {items}۔",
            },
        ),
    },
}
"""Prompt and explanation of each generated question, by question kind and language."""

MISTAKES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        # slips any size, count or percentage can carry
        "gb_as_gib": "That is the size in decimal GB ({gb}) written as GiB: divide by 2^30, "
        "not 10^9.",
        "double": "That is twice the right figure: a factor of 2 crept in (two bytes where "
        "there is one, or something counted twice).",
        "half": "That is half the right figure: a factor of 2 went missing (one byte where "
        "there are two, or something left out).",
        "bits": "That is 8 times the right size: bits counted as bytes.",
        "bytes_as_bits": "That is an eighth of the right size: bytes counted as bits.",
        # weights
        "weights.other_dtype": "That is {params} × the bytes of {other}; under {precision} "
        "the weights are {weight_dtype}.",
        "weights.all_states": "That is weights + gradients + optimizer states; the question "
        "asks for the weights alone.",
        # optimizer
        "optimizer.forgot_master": "That leaves out the fp32 master copy of the weights "
        "({master}) that {precision} keeps in the optimizer.",
        "optimizer.states_16bit": "That keeps m and v in {weight_dtype}; under {precision} "
        "they are fp32, like the master weights.",
        "optimizer.one_state": "That counts one state per parameter; {optimizer} keeps two "
        "(m and v).",
        "optimizer.adam_states": "That is what Adam's two states (m and v) would take; "
        "{optimizer} keeps less.",
        "optimizer.all_states": "That adds the weights and gradients; the question asks "
        "what the optimizer alone holds.",
        "optimizer.momentum_state": "That is one momentum buffer per parameter; plain SGD "
        "keeps none.",
        "optimizer.master_only": "That is an fp32 master copy; {precision} keeps none.",
        "optimizer.weights_copy": "That is a copy of the weights; plain SGD updates them in "
        "place and keeps nothing.",
        # bytes per parameter
        "bpp.grads_16bit": "That counts 16-bit gradients (2 bytes); here they are {grad_dtype} "
        "({g} bytes).",
        "bpp.grads_16bit.counted": "That is the ZeRO paper's 16 (2 + 2 + 12), which assumes "
        "16-bit gradients; here they are {grad_dtype} ({g} bytes).",
        "bpp.grads_fp32": "That counts fp32 gradients (4 bytes); here they are {grad_dtype}.",
        "bpp.grads_fp32.counted": "That counts fp32 gradients (Megatron-LM's 18); here they are "
        "{grad_dtype}.",
        "bpp.forgot_master": "That forgets the fp32 master weights (4 bytes per parameter).",
        "bpp.grad_copy": "That counts 16-bit gradients plus an fp32 copy of them (2 + 4 bytes); "
        "this recipe keeps one {grad_dtype} gradient ({g} bytes).",
        "bpp.grad_copy.counted": "That counts 16-bit gradients plus an fp32 copy of them (2 + 4 "
        "bytes: Megatron-LM's 20 with float16 gradients); this recipe keeps one {grad_dtype} "
        "gradient ({g} bytes).",
        "bpp.no_master_here": "That adds a 4-byte master copy; {precision} keeps none (the "
        "optimizer updates the {weight_dtype} weights themselves).",
        "bpp.states_fp32": "That keeps the optimizer states in fp32; under {precision} they "
        "are {state_dtype}.",
        "bpp.forgot_grads": "That leaves out the gradients ({grad_dtype}, {g} bytes).",
        "bpp.adam_states": "That counts Adam's two states (m and v, {full_states} bytes in "
        "{state_dtype}); {optimizer} keeps {s}.",
        "bpp.states_full_size": "That keeps m and v in {state_dtype} ({full_states} bytes), as "
        "torch's AdamW does; {optimizer} stores each in 1 byte plus a 4-byte absmax per 2048 "
        "elements ({s}).",
        "bpp.as_fp32": "That counts the weights and gradients in fp32, as fp32 training does; "
        "under {precision} the weights are {weight_dtype}.",
        "bpp.as_mixed": "That is the count of a -mixed recipe (fp32 gradients, master weights "
        "and states); {precision} keeps everything in {weight_dtype}.",
        "bpp.forgot_optimizer": "That counts weights and gradients only; the optimizer's "
        "{o} bytes are missing.",
        # components
        "dominant.smaller": "The {term} come to {size}; the {largest_term} are larger "
        "({largest_b}).",
        # activations
        "acts.one_layer": "That is one block's share ({per_block}); the model has {layers} blocks.",
        "acts.blocks_only": "That is the blocks alone; the embedding, the LM head and the "
        "loss keep {outside} more.",
        "acts.full": "That is what full recompute keeps ({full_value}); without recompute "
        "every block keeps all its saved tensors.",
        "saves.as_zero": "That counts activations under full recompute as zero; the block "
        "inputs and the loss's tensors stay ({full_value}).",
        "saves.kept": "That is what full recompute keeps, not what it saves.",
        "saves.per_layer": "That is the saving of one block; there are {layers}.",
        # FLOPs
        "flops.of_forward": "That is the extra as a share of the forward alone ({extra} of "
        "{forward}); a step is forward + backward, about 3 forwards.",
        "flops.textbook": "That is the textbook +33.3%: it assumes the whole forward is "
        "replayed, but the embedding, the LM head and the loss ({outside_share} of the "
        "forward here) are not.",
        "flops.whole_step": "That replays the whole step; only the blocks' forward runs "
        "again, never the backward.",
        "flops.against_backward": "That compares the extra forward with the backward alone "
        "(1 of 2 units); the step is 3 units.",
        "flops.two_forwards": "That replays the forward twice; full recompute replays it once.",
        # checkpoint placement
        "sqrt.every_block": "That is one checkpoint per block: full recompute, not sqrt(N).",
        "sqrt.segment_length": "That is k, the length of a segment; the checkpoints are one "
        "per segment: ceil({layers} / {k}).",
        "sqrt.one": "One checkpoint would make backward rebuild the whole model at once.",
        "sqrt.half": "That is N/2, a checkpoint every other block.",
        "sqrt.off_by_one": "Off by one: the segments are ceil(N / k), rounding up.",
        "sqrt.flops_per_k": "That replays one block in {k}; backward rebuilds every segment "
        "from its checkpoint, so every block's forward runs again.",
        "sqrt.flops_free": "Checkpointing is not free: the tensors it drops are rebuilt by "
        "running the forward again.",
        "sqrt.flops_per_block": "That replays the forward from the segment's checkpoint up to "
        "each block for that block's backward: 1 + 2 + … + {k} = {k}({k} + 1)/2 block forwards "
        "per segment, ({k} + 1)/2 times the real cost. The segment is rebuilt once, and its "
        "tensors stay until the segment's backward is done.",
        "sqrt.flops_segment_per_block": "That rebuilds the whole segment of {k} blocks for each "
        "of its blocks' backward, {k} times the real cost; it is rebuilt once, and its tensors "
        "stay until the segment's backward is done.",
        "everyk.forgot_rebuild": "That is only what the forward keeps; backward rebuilds a "
        "segment of {every} blocks on top of it ({rebuild}).",
        "everyk.one_block": "That rebuilds one block at a time, as full recompute does; "
        "every-k rebuilds a whole segment of {every} blocks at once.",
        "everyk.full": "That is full recompute's worst moment (k = 1).",
        "everyk.none": "That keeps every saved tensor, as without recompute.",
        "everyk.k1": "k = 1 is full recompute: every block input is kept, one block rebuilt "
        "at a time; {worst} at the worst moment, more than k = {best} ({best_worst}).",
        "everyk.worse": "k = {k} leaves {worst} alive at the worst moment, more than k = "
        "{best} ({best_worst}).",
        # peak
        "fits.sum_all": "That adds all four components and the overhead as if they coexisted; "
        "the peak is the largest single moment of the step.",
        "fits.states_only": "That is the model states and the overhead only; the peak moment "
        "also holds activations or temporaries.",
        "fits.no_overhead": "That leaves out the {overhead} of runtime overhead the profile "
        "assumes.",
        "fits.verdict": "The size is right, but compare it with the {usable} usable "
        "({gpu_memory} less the {reserve} reserve): it {verdict}.",
        "fits.headroom_forgotten": "The size is right, but that compares it with all of "
        "{gpu_memory}; the estimate keeps {reserve} free (--headroom) for the caching "
        "allocator's cache and fragmentation, so only {usable} is usable and it {verdict}.",
        # cheapest fit
        "cheap.base_not_fit": "Without any strategy the peak is {peak}, over the {usable} usable.",
        "cheap.not_fit": "With {option} the peak is still {peak}, over the {usable} usable.",
        "cheap.host_not_fit": "With {option} it fits the GPU ({peak}) but needs {host} of host RAM "
        "per node, more than the node's {host_memory}.",
        "cheap.recompute_alone": "Full recompute alone still peaks at {peak}: it does not "
        "touch parameters, gradients or optimizer states.",
        "cheap.unneeded": "With {option} it also fits, but adds {cost} per step that is not "
        "needed.",
        "cheap.costlier": "With {option} it fits ({peak}) but adds {cost} per step, more than "
        "{answer_label} (+{answer_cost}).",
        "cheap.none_fits": "{answer_label} fits, at {answer_peak}.",
    },
    Lang.ur: {
        "gb_as_gib": "یہ ڈیسیمل GB ({gb}) والا عدد ہے جسے GiB لکھ دیا گیا: 10^9 نہیں، 2^30 "
        "سے تقسیم کریں۔",
        "double": "یہ درست عدد کا دو گنا ہے: کہیں 2 کا ضرب آ گیا (ایک بائٹ کی جگہ دو، یا "
        "کوئی چیز دو بار گنی گئی)۔",
        "half": "یہ درست عدد کا آدھا ہے: کہیں 2 کا ضرب رہ گیا (دو بائٹس کی جگہ ایک، یا کوئی "
        "چیز گننے سے رہ گئی)۔",
        "bits": "یہ درست سائز کا 8 گنا ہے: بٹس کو بائٹس گن لیا گیا۔",
        "bytes_as_bits": "یہ درست سائز کا آٹھواں حصہ ہے: بائٹس کو بٹس گن لیا گیا۔",
        "weights.other_dtype": "یہ {params} × {other} کے بائٹس ہے؛ {precision} میں ویٹس "
        "{weight_dtype} ہیں۔",
        "weights.all_states": "یہ ویٹس + گریڈینٹس + آپٹیمائزر اسٹیٹس ہے؛ سوال صرف ویٹس کا ہے۔",
        "optimizer.forgot_master": "اس میں ویٹس کی وہ fp32 ماسٹر کاپی ({master}) شامل نہیں "
        "جو {precision} آپٹیمائزر میں رکھتا ہے۔",
        "optimizer.states_16bit": "یہ m اور v کو {weight_dtype} میں گنتا ہے؛ {precision} "
        "میں یہ ماسٹر ویٹس کی طرح fp32 ہیں۔",
        "optimizer.one_state": "یہ فی پیرامیٹر ایک اسٹیٹ گنتا ہے؛ {optimizer} دو (m اور v) "
        "رکھتا ہے۔",
        "optimizer.adam_states": "اتنی میموری Adam کی دو اسٹیٹس (m اور v) لیتیں؛ "
        "{optimizer} اس سے کم رکھتا ہے۔",
        "optimizer.all_states": "اس میں ویٹس اور گریڈینٹس بھی جمع ہیں؛ سوال صرف آپٹیمائزر کا ہے۔",
        "optimizer.momentum_state": "یہ فی پیرامیٹر ایک مومینٹم بفر ہے؛ سادہ SGD کوئی نہیں رکھتا۔",
        "optimizer.master_only": "یہ fp32 ماسٹر کاپی ہے؛ {precision} کوئی نہیں رکھتا۔",
        "optimizer.weights_copy": "یہ ویٹس کی ایک کاپی ہے؛ سادہ SGD انہیں اپنی جگہ اپڈیٹ "
        "کرتا ہے اور کچھ نہیں رکھتا۔",
        "bpp.grads_16bit": "یہ 16-bit گریڈینٹس (2 بائٹس) گنتا ہے؛ یہاں گریڈینٹس {grad_dtype} "
        "({g} بائٹس) ہیں۔",
        "bpp.grads_16bit.counted": "یہ ZeRO پیپر کے 16 بائٹس (2 + 2 + 12) ہیں، جو 16-bit "
        "گریڈینٹس مانتے ہیں؛ یہاں گریڈینٹس {grad_dtype} ({g} بائٹس) ہیں۔",
        "bpp.grads_fp32": "یہ fp32 گریڈینٹس (4 بائٹس) گنتا ہے؛ یہاں گریڈینٹس {grad_dtype} ہیں۔",
        "bpp.grads_fp32.counted": "یہ fp32 گریڈینٹس گنتا ہے (Megatron-LM کے 18 بائٹس)؛ یہاں "
        "گریڈینٹس {grad_dtype} ہیں۔",
        "bpp.forgot_master": "یہ fp32 ماسٹر ویٹس (فی پیرامیٹر 4 بائٹس) بھول جاتا ہے۔",
        "bpp.grad_copy": "یہ 16-bit گریڈینٹس اور ان کی ایک fp32 کاپی (2 + 4 بائٹس) گنتا ہے؛ یہ "
        "طریقہ ایک ہی {grad_dtype} گریڈینٹ ({g} بائٹس) رکھتا ہے۔",
        "bpp.grad_copy.counted": "یہ 16-bit گریڈینٹس اور ان کی ایک fp32 کاپی (2 + 4 بائٹس: "
        "float16 گریڈینٹس کے ساتھ Megatron-LM کے 20 بائٹس) گنتا ہے؛ یہ طریقہ ایک ہی {grad_dtype} "
        "گریڈینٹ ({g} بائٹس) رکھتا ہے۔",
        "bpp.no_master_here": "یہ 4 بائٹس کی ماسٹر کاپی جوڑتا ہے؛ {precision} کوئی نہیں "
        "رکھتا (آپٹیمائزر {weight_dtype} ویٹس کو ہی اپڈیٹ کرتا ہے)۔",
        "bpp.states_fp32": "یہ آپٹیمائزر اسٹیٹس کو fp32 میں گنتا ہے؛ {precision} میں یہ "
        "{state_dtype} ہیں۔",
        "bpp.forgot_grads": "اس میں گریڈینٹس ({grad_dtype}، {g} بائٹس) شامل نہیں۔",
        "bpp.adam_states": "یہ Adam کی دو اسٹیٹس ({state_dtype} میں m اور v، {full_states} "
        "بائٹس) گنتا ہے؛ {optimizer} کی اسٹیٹس {s} بائٹس ہیں۔",
        "bpp.states_full_size": "یہ m اور v کو {state_dtype} میں ({full_states} بائٹس) گنتا ہے، "
        "جیسے torch کا AdamW رکھتا ہے؛ {optimizer} ہر ایک کو 1 بائٹ میں رکھتا ہے، ہر 2048 "
        "عناصر پر 4 بائٹس کے ایک absmax کے ساتھ ({s})۔",
        "bpp.as_fp32": "یہ ویٹس اور گریڈینٹس کو fp32 میں گنتا ہے، جیسے fp32 ٹریننگ؛ "
        "{precision} میں ویٹس {weight_dtype} ہیں۔",
        "bpp.as_mixed": "یہ کسی -mixed طریقے کی گنتی ہے (fp32 گریڈینٹس، ماسٹر ویٹس اور "
        "اسٹیٹس)؛ {precision} سب کچھ {weight_dtype} میں رکھتا ہے۔",
        "bpp.forgot_optimizer": "یہ صرف ویٹس اور گریڈینٹس گنتا ہے؛ آپٹیمائزر کے {o} بائٹس رہ گئے۔",
        "dominant.smaller": "{term} {size} ہیں؛ {largest_term} ان سے زیادہ ہیں ({largest_b})۔",
        "acts.one_layer": "یہ ایک بلاک کا حصہ ({per_block}) ہے؛ ماڈل میں {layers} بلاکس ہیں۔",
        "acts.blocks_only": "یہ صرف بلاکس ہیں؛ ایمبیڈنگ، LM ہیڈ اور لاس مزید {outside} رکھتے ہیں۔",
        "acts.full": "یہ وہ ہے جو فل ری کمپیوٹ رکھتا ہے ({full_value})؛ ری کمپیوٹ کے بغیر ہر "
        "بلاک اپنے تمام محفوظ ٹینسرز رکھتا ہے۔",
        "saves.as_zero": "یہ فل ری کمپیوٹ میں ایکٹیویشنز کو صفر گنتا ہے؛ بلاکس کے ان پٹ اور "
        "لاس کے ٹینسرز رہتے ہیں ({full_value})۔",
        "saves.kept": "یہ وہ ہے جو فل ری کمپیوٹ رکھتا ہے، نہ کہ جو بچاتا ہے۔",
        "saves.per_layer": "یہ ایک بلاک کی بچت ہے؛ بلاکس {layers} ہیں۔",
        "flops.of_forward": "یہ اضافہ صرف فارورڈ کے حصے کے طور پر ہے ({forward} میں سے "
        "{extra})؛ اسٹیپ فارورڈ + بیک ورڈ ہے، تقریباً 3 فارورڈ۔",
        "flops.textbook": "یہ نصابی +33.3% ہے: یہ مانتا ہے کہ پورا فارورڈ دوبارہ چلتا ہے، "
        "مگر ایمبیڈنگ، LM ہیڈ اور لاس (یہاں فارورڈ کا {outside_share}) دوبارہ نہیں چلتے۔",
        "flops.whole_step": "یہ پورا اسٹیپ دوبارہ چلاتا ہے؛ صرف بلاکس کا فارورڈ دوبارہ "
        "چلتا ہے، بیک ورڈ کبھی نہیں۔",
        "flops.against_backward": "یہ اضافی فارورڈ کا موازنہ صرف بیک ورڈ سے کرتا ہے (2 میں "
        "سے 1 یونٹ)؛ اسٹیپ 3 یونٹ کا ہے۔",
        "flops.two_forwards": "یہ فارورڈ دو بار دہراتا ہے؛ فل ری کمپیوٹ اسے ایک بار دہراتا ہے۔",
        "sqrt.every_block": "یہ ہر بلاک کا ایک چیک پوائنٹ ہے: یہ فل ری کمپیوٹ ہے، sqrt(N) نہیں۔",
        "sqrt.segment_length": "یہ k ہے، یعنی ایک سیگمنٹ کی لمبائی؛ چیک پوائنٹ ہر سیگمنٹ کا "
        "ایک ہوتا ہے: ceil({layers} / {k})۔",
        "sqrt.one": "ایک ہی چیک پوائنٹ ہو تو بیک ورڈ کو پورا ماڈل ایک ساتھ دوبارہ بنانا پڑتا۔",
        "sqrt.half": "یہ N/2 ہے، یعنی ہر دوسرے بلاک پر ایک چیک پوائنٹ۔",
        "sqrt.off_by_one": "ایک کا فرق: سیگمنٹس ceil(N / k) ہیں، اوپر کی طرف راؤنڈ کر کے۔",
        "sqrt.flops_per_k": "یہ {k} میں سے ایک بلاک دہراتا ہے؛ بیک ورڈ ہر سیگمنٹ کو اس کے چیک "
        "پوائنٹ سے دوبارہ بناتا ہے، اس لیے ہر بلاک کا فارورڈ دوبارہ چلتا ہے۔",
        "sqrt.flops_free": "چیک پوائنٹنگ مفت نہیں: جو ٹینسرز یہ چھوڑتی ہے وہ فارورڈ دوبارہ "
        "چلا کر بنائے جاتے ہیں۔",
        "sqrt.flops_per_block": "یہ ہر بلاک کے بیک ورڈ کے لیے سیگمنٹ کے چیک پوائنٹ سے اس بلاک "
        "تک فارورڈ دوبارہ چلاتا ہے: فی سیگمنٹ 1 + 2 + … + {k} = {k}({k} + 1)/2 بلاک فارورڈ، "
        "یعنی اصل لاگت کا ({k} + 1)/2 گنا۔ سیگمنٹ ایک ہی بار بنتا ہے اور اس کے ٹینسرز سیگمنٹ "
        "کا بیک ورڈ ختم ہونے تک رہتے ہیں۔",
        "sqrt.flops_segment_per_block": "یہ {k} بلاکس کا پورا سیگمنٹ اس کے ہر بلاک کے بیک ورڈ "
        "کے لیے دوبارہ بناتا ہے، یعنی اصل لاگت کا {k} گنا؛ سیگمنٹ ایک ہی بار بنتا ہے اور اس کے "
        "ٹینسرز سیگمنٹ کا بیک ورڈ ختم ہونے تک رہتے ہیں۔",
        "everyk.forgot_rebuild": "یہ صرف وہ ہے جو فارورڈ رکھتا ہے؛ بیک ورڈ اس کے اوپر "
        "{every} بلاکس کا ایک سیگمنٹ دوبارہ بناتا ہے ({rebuild})۔",
        "everyk.one_block": "یہ ایک وقت میں ایک بلاک دوبارہ بناتا ہے، جیسے فل ری کمپیوٹ؛ "
        "every-k ایک ساتھ {every} بلاکس کا پورا سیگمنٹ دوبارہ بناتا ہے۔",
        "everyk.full": "یہ فل ری کمپیوٹ (k = 1) کا سب سے بھاری لمحہ ہے۔",
        "everyk.none": "یہ ہر محفوظ ٹینسر رکھتا ہے، جیسے ری کمپیوٹ کے بغیر۔",
        "everyk.k1": "k = 1 فل ری کمپیوٹ ہے: ہر بلاک کا ان پٹ رکھا جاتا ہے اور ایک وقت میں "
        "ایک بلاک دوبارہ بنتا ہے؛ میموری کے عروج (پیک) پر {worst}، جو k = {best} ({best_worst}) "
        "سے زیادہ ہے۔",
        "everyk.worse": "k = {k} کے ساتھ میموری کے عروج (پیک) پر {worst} موجود ہوتی ہے، جو "
        "k = {best} ({best_worst}) سے زیادہ ہے۔",
        "fits.sum_all": "یہ چاروں حصے اور اوورہیڈ ایسے جمع کرتا ہے جیسے سب ایک ساتھ موجود "
        "ہوں؛ پیک اسٹیپ کا سب سے بھاری ایک لمحہ ہے۔",
        "fits.states_only": "یہ صرف ماڈل اسٹیٹس اور اوورہیڈ ہیں؛ پیک کے لمحے میں "
        "ایکٹیویشنز یا عارضی ٹینسرز بھی ہوتے ہیں۔",
        "fits.no_overhead": "اس میں پروفائل کا فرض کردہ {overhead} رن ٹائم اوورہیڈ شامل نہیں۔",
        "fits.verdict": "سائز درست ہے، مگر اس کا موازنہ قابلِ استعمال {usable} سے کریں "
        "({gpu_memory} میں سے {reserve} ریزرو نکال کر): یہ {verdict}۔",
        "fits.headroom_forgotten": "سائز درست ہے، مگر یہ اس کا موازنہ پوری {gpu_memory} سے "
        "کرتا ہے؛ تخمینہ کیشنگ ایلوکیٹر کے کیش اور فریگمنٹیشن کے لیے {reserve} خالی رکھتا ہے "
        "(--headroom)، اس لیے صرف {usable} قابلِ استعمال ہے اور یہ {verdict}۔",
        "cheap.base_not_fit": "کسی حکمتِ عملی کے بغیر پیک {peak} ہے، جو قابلِ استعمال "
        "{usable} سے زیادہ ہے۔",
        "cheap.not_fit": "اس طریقے ({option}) سے پیک {peak} ہے، جو قابلِ استعمال {usable} سے "
        "زیادہ ہے۔",
        "cheap.host_not_fit": "یہ طریقہ ({option}) GPU پر فٹ ہو جاتا ہے ({peak}) مگر اسے فی "
        "نوڈ {host} ہوسٹ RAM چاہیے، جو نوڈ کی {host_memory} سے زیادہ ہے۔",
        "cheap.recompute_alone": "صرف فل ری کمپیوٹ کے ساتھ بھی پیک {peak} ہے: یہ پیرامیٹرز، "
        "گریڈینٹس اور آپٹیمائزر اسٹیٹس کو نہیں چھوتا۔",
        "cheap.unneeded": "یہ طریقہ ({option}) بھی فٹ ہو جاتا ہے، مگر فی اسٹیپ {cost} بڑھاتا "
        "ہے جس کی ضرورت نہیں۔",
        "cheap.costlier": "یہ طریقہ ({option}) فٹ ہو جاتا ہے ({peak}) مگر فی اسٹیپ {cost} "
        "بڑھاتا ہے، جو {answer_label} (+{answer_cost}) سے زیادہ ہے۔",
        "cheap.none_fits": "ایک طریقہ فٹ ہو جاتا ہے: {answer_label}، پیک {answer_peak}۔",
    },
}
"""What each distractor stands for, by mistake key and language: shown when it is picked."""

for _words in (words_finetune, words_parallel, words_moe, words_runtime):
    for _name, _by_lang in _words.TEMPLATES.items():
        if _name in TEMPLATES:
            raise ValueError(f"question kind {_name!r} has words twice")
        TEMPLATES[_name] = _by_lang
    for _lang in Lang:
        for _table, _more in ((MISTAKES, _words.MISTAKES), (LABELS, _words.LABELS)):
            _twice = set(_table[_lang]) & set(_more[_lang])
            if _twice:
                raise ValueError(f"words defined twice: {sorted(_twice)}")
            _table[_lang].update(_more[_lang])
