"""English and Urdu text of the questions generated from the learner's model.

Only words live here; every number is computed in ``generate.py`` from ``estimate`` and filled
in with ``str.format``. Each template names the values it uses, so a translator can reorder
them freely. Numbers, units (GiB, GB), dtypes and strategy names in code (``bf16-mixed``) stay
in Latin script in Urdu, as in the bank files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memcalc.quiz.bank import Lang


@dataclass(frozen=True)
class Template:
    """The words of one generated question in one language."""

    prompt: str
    explanation: str
    parts: dict[str, str] = field(default_factory=dict)
    """Optional sentences the generator picks from and passes in as values."""


CONTEXT: dict[Lang, str] = {
    Lang.en: "{model} (batch {batch}, sequence {seq}, {precision}, {optimizer})",
    Lang.ur: "{model} (بیچ {batch}، سیکوئنس {seq}، {precision}، {optimizer})",
}
"""How a prompt names the learner's setup."""

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
        "offload.activations": "activations to CPU",
        "strategy_join": " + ",
        "nothing_needed": "Nothing: it already fits",
        "none_fits": "No recompute / offload combination makes it fit",
        "phase.forward": "forward",
        "phase.backward": "backward",
        "phase.optimizer step": "optimizer step",
        "list_join": "; ",
        "cost_item": "{label} ({peak}, +{cost})",
    },
    Lang.ur: {
        "bytes_per_param": "{n} بائٹس",
        "parameters": "پیرامیٹرز (ویٹس)",
        "gradients": "گریڈینٹس",
        "optimizer": "آپٹیمائزر اسٹیٹس",
        "activations": "بیک ورڈ کے لیے محفوظ ایکٹیویشنز",
        "fits": "فٹ ہو جاتا ہے",
        "does_not_fit": "فٹ نہیں ہوتا",
        "peak_verdict": "{value}: {verdict}",
        "recompute.selective": "سلیکٹو ری کمپیوٹ",
        "recompute.every-k": "sqrt(N) چیک پوائنٹنگ (ہر {k} بلاکس پر)",
        "recompute.full": "فل ری کمپیوٹ",
        "offload.optimizer": "آپٹیمائزر اسٹیٹس CPU پر",
        "offload.activations": "ایکٹیویشنز CPU پر",
        "strategy_join": " + ",
        "nothing_needed": "کچھ نہیں: یہ پہلے ہی فٹ ہو جاتا ہے",
        "none_fits": "ری کمپیوٹ / آف لوڈ کا کوئی بھی امتزاج اسے فٹ نہیں کرتا",
        "phase.forward": "فارورڈ",
        "phase.backward": "بیک ورڈ",
        "phase.optimizer step": "آپٹیمائزر اسٹیپ",
        "list_join": "؛ ",
        "cost_item": "{label} ({peak}، +{cost})",
    },
}
"""Option labels and short words the generators combine."""

TEMPLATES: dict[str, dict[Lang, Template]] = {
    "weights": {
        Lang.en: Template(
            prompt="{model} has {params} parameters. Under {precision} its weights are stored "
            "in {weight_dtype} ({weight_bytes} bytes each). How much GPU memory do the weights "
            "alone take?",
            explanation="{params} × {weight_bytes} bytes = {value_bytes} bytes = {value} "
            "(1 GiB = 2^30 bytes). The same bytes are {value_gb} in decimal GB (10^9 bytes), "
            "so reading GB and writing GiB gives {gb_as_gib}. The weights are only one of the "
            "model states: the gradients add {grads} and the optimizer {optimizer}.",
        ),
        Lang.ur: Template(
            prompt="{model} میں {params} پیرامیٹرز ہیں۔ {precision} میں اس کے ویٹس {weight_dtype} "
            "میں رکھے جاتے ہیں (ہر ایک {weight_bytes} بائٹس)۔ صرف ویٹس GPU کی کتنی میموری "
            "لیتے ہیں؟",
            explanation="{params} × {weight_bytes} بائٹس = {value_bytes} بائٹس = {value} "
            "(1 GiB = 2^30 بائٹس)۔ یہی بائٹس ڈیسیمل GB (10^9 بائٹس) میں {value_gb} ہیں، اس لیے "
            "GB پڑھ کر GiB لکھنے سے {gb_as_gib} بنتا ہے۔ ویٹس ماڈل اسٹیٹس کا صرف ایک حصہ ہیں: "
            "گریڈینٹس مزید {grads} اور آپٹیمائزر {optimizer} لیتا ہے۔",
        ),
    },
    "optimizer-states": {
        Lang.en: Template(
            prompt="You train {model} ({params} parameters) with {optimizer} under {precision}. "
            "How much GPU memory does the optimizer hold between steps?",
            explanation="{optimizer} keeps {states_per_param} state tensor(s) per parameter in "
            "{state_dtype}: {states}. {master_sentence}The per-tensor step counters add "
            "{step_bytes} bytes. Total: {value}. Recompute and activation offload do not change "
            "this number; optimizer offload or ZeRO do.",
            parts={
                "master_mixed": "Under {precision} the optimizer also keeps an fp32 master copy "
                "of the weights: {params} × 4 bytes = {master}; forgetting it gives {no_master}. ",
                "master_none": "{precision} keeps no separate master copy of the weights. ",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {model} ({params} پیرامیٹرز) کو {precision} میں {optimizer} کے ساتھ ٹرین "
            "کرتے ہیں۔ دو اسٹیپس کے درمیان آپٹیمائزر GPU کی کتنی میموری رکھتا ہے؟",
            explanation="{optimizer} ہر پیرامیٹر کے لیے {states_per_param} اسٹیٹ ٹینسر "
            "{state_dtype} میں رکھتا ہے: {states}۔ {master_sentence}ہر ٹینسر کے step کاؤنٹر "
            "مزید {step_bytes} بائٹس لیتے ہیں۔ کل: {value}۔ ری کمپیوٹ اور ایکٹیویشن آف لوڈ "
            "اس عدد کو نہیں بدلتے؛ آپٹیمائزر آف لوڈ یا ZeRO بدلتے ہیں۔",
            parts={
                "master_mixed": "{precision} میں آپٹیمائزر ویٹس کی fp32 ماسٹر کاپی بھی رکھتا ہے: "
                "{params} × 4 بائٹس = {master}؛ اسے بھول جائیں تو {no_master} بنتا ہے۔ ",
                "master_none": "{precision} میں ویٹس کی کوئی الگ ماسٹر کاپی نہیں ہوتی۔ ",
            },
        ),
    },
    "bytes-per-param": {
        Lang.en: Template(
            prompt="Counting weights, gradients and optimizer states (master weights "
            "included), how many bytes per parameter does training {model} with {optimizer} "
            "under {precision} take?",
            explanation="Weights {w} ({weight_dtype}) + gradients {g} ({grad_dtype}) + "
            "optimizer {o} = {n} bytes per parameter. Megatron's 18 keeps fp32 gradients; the "
            "ZeRO paper's 16 assumes 16-bit gradients; an extra fp32 copy of the gradients "
            "makes 20; forgetting the fp32 master weights gives 4 fewer. For {model}: "
            "{n} × {params} = {total}, before a single activation.",
        ),
        Lang.ur: Template(
            prompt="ویٹس، گریڈینٹس اور آپٹیمائزر اسٹیٹس (ماسٹر ویٹس سمیت) گن کر، {model} کو "
            "{precision} میں {optimizer} کے ساتھ ٹرین کرنے پر فی پیرامیٹر کتنے بائٹس لگتے ہیں؟",
            explanation="ویٹس {w} ({weight_dtype}) + گریڈینٹس {g} ({grad_dtype}) + آپٹیمائزر "
            "{o} = فی پیرامیٹر {n} بائٹس۔ Megatron کے 18 میں گریڈینٹس fp32 ہیں؛ ZeRO پیپر کے 16 "
            "میں گریڈینٹس 16-bit ہیں؛ گریڈینٹس کی ایک اضافی fp32 کاپی سے 20 بنتے ہیں؛ fp32 "
            "ماسٹر ویٹس بھولنے سے 4 کم۔ {model} کے لیے: {n} × {params} = {total}، ایک بھی "
            "ایکٹیویشن سے پہلے۔",
        ),
    },
    "dominant-component": {
        Lang.en: Template(
            prompt="Without recompute or offload, which of the four memory components is the "
            "largest when training {ctx}?",
            explanation="Parameters {params_b}, gradients {grads_b}, optimizer states {opt_b}, "
            "activations {acts_b}. Largest: {largest}. Activations grow with batch × "
            "sequence ({tokens} tokens here); the other three grow only with the parameter "
            "count.",
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ یا آف لوڈ کے بغیر، {ctx} کی ٹریننگ میں میموری کے چار حصوں میں "
            "سب سے بڑا کون سا ہے؟",
            explanation="پیرامیٹرز {params_b}، گریڈینٹس {grads_b}، آپٹیمائزر اسٹیٹس {opt_b}، "
            "ایکٹیویشنز {acts_b}۔ سب سے بڑا حصہ: {largest}۔ ایکٹیویشنز بیچ × سیکوئنس کے "
            "ساتھ بڑھتی ہیں (یہاں {tokens} ٹوکنز)؛ باقی تین صرف پیرامیٹرز کی تعداد کے ساتھ۔",
        ),
    },
    "activations": {
        Lang.en: Template(
            prompt="Without recompute, how much activation memory does training {ctx} keep on "
            "the GPU from the forward pass to the backward pass?",
            explanation="Each of the {layers} blocks saves {per_block}; the embedding, the LM "
            "head and the loss add {outside}; total {value}. {per_block} is one layer's "
            "share, not the model's: multiply by the number of layers. With full recompute it "
            "would be {full_value}, not zero: the block inputs and the loss's tensors stay.",
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ کے بغیر، {ctx} کی ٹریننگ فارورڈ پاس سے بیک ورڈ پاس تک GPU پر "
            "کتنی ایکٹیویشن میموری رکھتی ہے؟",
            explanation="{layers} بلاکس میں سے ہر ایک {per_block} محفوظ کرتا ہے؛ ایمبیڈنگ، LM "
            "ہیڈ اور لاس {outside} مزید؛ کل {value}۔ {per_block} ایک لیئر کا حصہ ہے، پورے ماڈل "
            "کا نہیں: اسے لیئرز کی تعداد سے ضرب دیں۔ فل ری کمپیوٹ کے ساتھ یہ {full_value} ہوتی، "
            "صفر نہیں: بلاکس کے ان پٹ اور لاس کے ٹینسرز رہتے ہیں۔",
        ),
    },
    "full-recompute-saves": {
        Lang.en: Template(
            prompt="Switching {ctx} from no recompute to full recompute (each block keeps only "
            "its input), how much activation memory do you save?",
            explanation="No recompute keeps {none_value}; full recompute keeps {full_value} "
            "(the {layers} block inputs plus the tensors outside the blocks, such as the "
            "loss's). Saved: {value}. Counting activations under full recompute as zero would "
            "claim {none_value}. In backward one block is rebuilt at a time, adding {rebuild} "
            "for a moment.",
        ),
        Lang.ur: Template(
            prompt="{ctx} کو بغیر ری کمپیوٹ سے فل ری کمپیوٹ (ہر بلاک صرف اپنا ان پٹ رکھتا ہے) پر "
            "لے جانے سے کتنی ایکٹیویشن میموری بچتی ہے؟",
            explanation="بغیر ری کمپیوٹ کے {none_value} رہتی ہے؛ فل ری کمپیوٹ {full_value} رکھتا "
            "ہے ({layers} بلاکس کے ان پٹ اور بلاکس سے باہر کے ٹینسرز، جیسے لاس کے)۔ بچت: "
            "{value}۔ فل ری کمپیوٹ میں ایکٹیویشنز کو صفر گننے سے {none_value} کا دعویٰ بنتا ہے۔ "
            "بیک ورڈ میں ایک وقت میں ایک بلاک دوبارہ بنتا ہے، جو لمحہ بھر کے لیے {rebuild} "
            "بڑھاتا ہے۔",
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
            "step on {gpu} at {mfu} MFU. The textbook +33.3% assumes the whole forward is "
            "recomputed.",
        ),
        Lang.ur: Template(
            prompt="فل ری کمپیوٹ بیک ورڈ کے دوران ہر بلاک کا فارورڈ دوسری بار چلاتا ہے۔ اس سے "
            "{ctx} کے ایک ٹریننگ اسٹیپ کے FLOPs کتنے بڑھ جاتے ہیں؟",
            explanation="ایک اسٹیپ تقریباً فارورڈ + بیک ورڈ = 3 × فارورڈ = {step_flops} ہے "
            "(بیک ورڈ ≈ 2 × فارورڈ)۔ ری کمپیوٹ {extra} بڑھاتا ہے: {layers} بلاکس کا ایک اور "
            "فارورڈ، مگر ایمبیڈنگ، LM ہیڈ اور لاس کا نہیں۔ یہ اسٹیپ کا {value} ہے (صرف فارورڈ "
            "کا {of_forward})، یعنی {gpu} پر {mfu} MFU سے فی اسٹیپ تقریباً {extra_time}۔ "
            "کتابی +33.3% یہ مانتا ہے کہ پورا فارورڈ دوبارہ چلتا ہے۔",
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
    "fits": {
        Lang.en: Template(
            prompt="Without recompute or offload, what is the estimated peak GPU memory of one "
            "training step of {ctx}, and does it fit on one {gpu} ({gpu_memory})?",
            explanation="The peak is the largest moment of the step, not the sum of the four "
            "components: here it comes in the {phase} phase at {where}, {peak} plus {overhead} "
            "of runtime overhead = {value}, against {gpu_memory} on {gpu}: it {verdict}. "
            "Adding up parameters, gradients, optimizer states and all activations would give "
            "{sum_value}.",
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ یا آف لوڈ کے بغیر، {ctx} کے ایک ٹریننگ اسٹیپ کی متوقع پیک GPU "
            "میموری کتنی ہے، اور کیا یہ ایک {gpu} ({gpu_memory}) پر فٹ ہوتی ہے؟",
            explanation="پیک اسٹیپ کا سب سے بھاری لمحہ ہے، چار حصوں کا مجموعہ نہیں: یہاں یہ "
            "{phase} مرحلے میں {where} پر آتا ہے، {peak} جمع {overhead} رن ٹائم اوورہیڈ = "
            "{value}، جبکہ {gpu} پر {gpu_memory} ہے: {verdict}۔ پیرامیٹرز، گریڈینٹس، آپٹیمائزر "
            "اسٹیٹس اور تمام ایکٹیویشنز جمع کرنے سے {sum_value} بنتا۔",
        ),
    },
    "cheapest-fit": {
        Lang.en: Template(
            prompt="What is the cheapest way (least time added per step by recompute FLOPs "
            "and offload transfers) to make training {ctx} fit on one {gpu} ({gpu_memory})?",
            explanation="{body}",
            parts={
                "already": "Without any strategy the peak is {base_peak}, within {gpu_memory}: "
                "nothing is needed, and every strategy would only add time.",
                "cheapest": "Without any strategy the peak is {base_peak}, over {gpu_memory}. "
                "The cheapest that fits is {answer} ({answer_peak}, +{answer_cost} per step). "
                "{others}{lesson}",
                "others": "Next cheapest: {items}. ",
                "lesson": "Recompute alone is not enough: full recompute still peaks at "
                "{full_peak}, because it does not touch parameters, gradients or optimizer "
                "states.",
                "none": "Without any strategy the peak is {base_peak}; even {best} peaks at "
                "{best_peak}, over {gpu_memory}. Recompute and offload are not enough here: "
                "shard the model states across GPUs (ZeRO/FSDP), use a smaller micro-batch, or "
                "use a larger GPU.",
            },
        ),
        Lang.ur: Template(
            prompt="{ctx} کی ٹریننگ کو ایک {gpu} ({gpu_memory}) پر فٹ کرنے کا سب سے سستا طریقہ "
            "کون سا ہے (ری کمپیوٹ FLOPs اور آف لوڈ ٹرانسفرز سے فی اسٹیپ سب سے کم اضافی وقت)؟",
            explanation="{body}",
            parts={
                "already": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے، جو {gpu_memory} کے اندر "
                "ہے: کچھ کرنے کی ضرورت نہیں، اور ہر حکمتِ عملی صرف وقت بڑھائے گی۔",
                "cheapest": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے، جو {gpu_memory} سے زیادہ "
                "ہے۔ فٹ ہونے والا سب سے سستا طریقہ {answer} ہے ({answer_peak}، فی اسٹیپ "
                "+{answer_cost})۔ {others}{lesson}",
                "others": "اس کے بعد سستے: {items}۔ ",
                "lesson": "صرف ری کمپیوٹ کافی نہیں: فل ری کمپیوٹ کے ساتھ بھی پیک {full_peak} ہے، "
                "کیونکہ یہ پیرامیٹرز، گریڈینٹس اور آپٹیمائزر اسٹیٹس کو نہیں چھوتا۔",
                "none": "کسی حکمتِ عملی کے بغیر پیک {base_peak} ہے؛ {best} کے ساتھ بھی پیک "
                "{best_peak} ہے، جو {gpu_memory} سے زیادہ ہے۔ یہاں ری کمپیوٹ اور آف لوڈ کافی "
                "نہیں: ماڈل اسٹیٹس کو کئی GPUs میں شارڈ کریں (ZeRO/FSDP)، مائیکرو بیچ چھوٹا "
                "کریں، یا بڑا GPU لیں۔",
            },
        ),
    },
}
"""Prompt and explanation of each generated question, by question kind and language."""
