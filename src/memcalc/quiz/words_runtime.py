"""English and Urdu words of the questions on what one GPU holds besides the four components
(``kinds_runtime.py``).

Sources the explanations name: PyTorch's CUDA memory management notes (``torch.cuda.
max_memory_allocated`` counts the caching allocator's live allocations; ``memory_reserved``
what it holds from the driver, cached free blocks included; the CUDA context is outside both);
Transformer Engine's fp8 recipe (linear inputs cast to e4m3 and saved in fp8 for the weight
gradient; Micikevicius et al. 2022 keep master weights in higher precision); Korthikanti et al.
2022 (the 5as/h score term of eager attention); ZeRO-Offload (Ren et al. 2021) and DeepSpeed's
``offload_optimizer.pin_memory``.
"""

from __future__ import annotations

from memcalc.quiz.bank import Lang
from memcalc.quiz.template import Template

TEMPLATES: dict[str, dict[Lang, Template]] = {
    "allocated-vs-reserved": {
        Lang.en: Template(
            prompt="memcalc estimates the peak of one training step of {ctx} on {gpu} at "
            "{peak}, of which {overhead} is the profile's runtime overhead (CUDA context and "
            "library workspaces). What would torch.cuda.max_memory_allocated() report after "
            "that step?",
            explanation="max_memory_allocated() counts the bytes of live tensors at their "
            "largest moment (here in the {phase} phase, {where}): {difference}. The runtime "
            "overhead is memory the process holds outside PyTorch's allocator: nvidia-smi "
            "shows it, the allocator's counters do not. nvidia-smi also shows what the caching "
            "allocator has reserved from the driver (torch.cuda.memory_reserved()): at least "
            "the allocated peak, plus the free blocks it caches and the fragmentation between "
            "them. {fit_rule}",
        ),
        Lang.ur: Template(
            prompt="memcalc کے تخمینے میں {gpu} پر {ctx} کے ایک ٹریننگ اسٹیپ کی پیک {peak} ہے، "
            "جس میں {overhead} پروفائل کا رن ٹائم اوورہیڈ ہے (CUDA کانٹیکسٹ اور لائبریری ورک "
            "اسپیسز)۔ اس اسٹیپ کے بعد torch.cuda.max_memory_allocated() کتنا بتائے گا؟",
            explanation="max_memory_allocated() زندہ ٹینسرز کے بائٹس ان کے سب سے بھاری لمحے "
            "میں گنتا ہے (یہاں {phase} مرحلے میں، {where}): {difference}۔ رن ٹائم اوورہیڈ وہ "
            "میموری ہے جو پروسیس PyTorch کے ایلوکیٹر سے باہر رکھتا ہے: nvidia-smi اسے دکھاتا "
            "ہے، ایلوکیٹر کے کاؤنٹر نہیں۔ nvidia-smi وہ میموری بھی دکھاتا ہے جو کیشنگ ایلوکیٹر "
            "نے ڈرائیور سے ریزرو کر رکھی ہے (torch.cuda.memory_reserved()): کم از کم ایلوکیٹڈ "
            "پیک جتنی، اور اس کے علاوہ وہ خالی بلاکس جو وہ کیش کرتا ہے اور ان کے بیچ کی "
            "فریگمنٹیشن۔ {fit_rule}",
        ),
    },
    "fp8-activations": {
        Lang.en: Template(
            prompt="Without recompute, training {model} (batch {batch}, sequence {seq}, "
            "{optimizer}) under bf16-mixed keeps {bf16_acts} of activations for backward. "
            "Under fp8-mixed (Transformer Engine style: the linear layers compute in fp8 "
            "e4m3), how much does it keep?",
            explanation="fp8 training saves the fp8 copy of each linear layer's input for "
            "backward, 1 byte instead of 2; the other saved tensors (the norms' inputs, "
            "attention's output and statistics, the activation function's inputs, the loss's "
            "logits) keep their bf16 or fp32 dtype: {saving} saved, not half. The weights stay "
            "bf16 with an fp32 master copy and the gradients keep their dtype, so the model "
            "states are the same {states}; {peak_sentence}",
            parts={
                "peak_lower": "the step's peak goes from {bf16_peak} to {fp8_peak}.",
                "peak_same": "the step's peak stays {bf16_peak}: the {phase} phase sets it, "
                "not the saved activations.",
            },
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ کے بغیر، bf16-mixed میں {model} (بیچ {batch}، سیکوئنس {seq}، "
            "{optimizer}) کی ٹریننگ بیک ورڈ کے لیے {bf16_acts} ایکٹیویشنز رکھتی ہے۔ "
            "fp8-mixed میں (Transformer Engine کی طرح: لینیئر لیئرز fp8 e4m3 میں کمپیوٹ کرتی "
            "ہیں) یہ کتنی رکھتی ہے؟",
            explanation="fp8 ٹریننگ ہر لینیئر لیئر کے ان پٹ کی fp8 کاپی بیک ورڈ کے لیے رکھتی "
            "ہے، 2 کی جگہ 1 بائٹ؛ باقی محفوظ ٹینسرز (نارمز کے ان پٹ، اٹینشن کا آؤٹ پٹ اور اس کے "
            "اعداد و شمار، ایکٹیویشن فنکشن کے ان پٹ، لاس کے لاجٹس) اپنے bf16 یا fp32 dtype میں "
            "رہتے ہیں: بچت {saving}، آدھی نہیں۔ ویٹس fp32 ماسٹر کاپی کے ساتھ bf16 میں رہتے ہیں "
            "اور گریڈینٹس کا dtype نہیں بدلتا، اس لیے ماڈل اسٹیٹس وہی {states} رہتی ہیں؛ "
            "{peak_sentence}",
            parts={
                "peak_lower": "اسٹیپ کی پیک {bf16_peak} سے {fp8_peak} ہو جاتی ہے۔",
                "peak_same": "اسٹیپ کی پیک {bf16_peak} ہی رہتی ہے: اسے {phase} مرحلہ طے کرتا ہے، "
                "محفوظ ایکٹیویشنز نہیں۔",
            },
        ),
    },
    "grad-accumulation": {
        Lang.en: Template(
            prompt="You train {ctx} with gradient accumulation: {steps} micro-batches of "
            "{batch} per optimizer step, an effective batch of {big_batch}. Without recompute "
            "or offload, what is the estimated peak of one step?",
            explanation="Each micro-batch's activations ({acts}) are freed by its own backward "
            "before the next forward starts, and the gradients accumulate in place in the "
            "same tensors ({grads_b}), so the peak is one micro-batch's: {value} ({where}). "
            "{peak_sentence}One micro-batch of {big_batch} would keep {big_acts} of "
            "activations and peak at {big_peak}. The tokens and FLOPs per step are the same; "
            "accumulation runs {steps} smaller passes, each less efficient on the GPU.",
            parts={
                "same": "Here the two peaks are about the same: the {phase} phase sets them, "
                "and the activations are a small part of it. ",
                "lower": "",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو گریڈینٹ ایکیومولیشن کے ساتھ ٹرین کرتے ہیں: ہر آپٹیمائزر اسٹیپ "
            "میں {batch} کے {steps} مائیکرو بیچز، یعنی مؤثر بیچ {big_batch}۔ ری کمپیوٹ یا آف "
            "لوڈ کے بغیر ایک اسٹیپ کی متوقع پیک کتنی ہے؟",
            explanation="ہر مائیکرو بیچ کی ایکٹیویشنز ({acts}) اگلا فارورڈ شروع ہونے سے پہلے "
            "اسی کے بیک ورڈ میں خالی ہو جاتی ہیں، اور گریڈینٹس انہی ٹینسرز ({grads_b}) میں جمع "
            "ہوتے رہتے ہیں، اس لیے پیک ایک مائیکرو بیچ والی ہے: {value} ({where})۔ "
            "{peak_sentence}{big_batch} کا ایک مائیکرو بیچ {big_acts} ایکٹیویشنز رکھتا اور اس "
            "کی پیک {big_peak} ہوتی۔ فی اسٹیپ ٹوکنز اور FLOPs وہی ہیں؛ ایکیومولیشن {steps} "
            "چھوٹے پاس چلاتی ہے، جن میں سے ہر ایک GPU پر کم مؤثر ہوتا ہے۔",
            parts={
                "same": "یہاں دونوں پیک تقریباً برابر ہیں: انہیں {phase} مرحلہ طے کرتا ہے، اور "
                "ایکٹیویشنز اس کا چھوٹا سا حصہ ہیں۔ ",
                "lower": "",
            },
        ),
    },
    "eager-attention-cost": {
        Lang.en: Template(
            prompt="Training {ctx} without recompute: how much more activation memory does "
            "eager attention keep than SDPA ({layers} layers, {heads} query heads, {kv_heads} "
            "key/value heads)?",
            explanation="Eager attention computes the b × heads × s × s scores and keeps them "
            "for backward: {scores} scores ({layers} layers × {batch} × {heads} heads × "
            "{seq}²) at about {per_score} bytes each ({stored}), in all {value}, {layer} per "
            "layer. SDPA's fused kernel keeps only its output and one fp32 log-sum-exp per "
            "row: {sdpa_acts} in all against {eager_acts}. The scores are per query head, so "
            "grouped-query attention does not shrink them, and they grow with s²: twice the "
            "sequence, four times the bytes (the 5as/h term of Korthikanti et al. 2022).",
            parts={
                "stored": "what the softmax{dropout} and the matmul with V save for backward, "
                "in the dtypes this model's attention code uses",
                "dropout": ", the attention dropout (its mask and output)",
            },
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ کے بغیر {ctx} کی ٹریننگ میں eager اٹینشن SDPA سے کتنی زیادہ "
            "ایکٹیویشن میموری رکھتی ہے ({layers} لیئرز، {heads} کوئری ہیڈز، {kv_heads} کی/ویلیو "
            "ہیڈز)؟",
            explanation="eager اٹینشن b × ہیڈز × s × s اسکورز بناتی ہے اور انہیں بیک ورڈ کے لیے "
            "رکھتی ہے: {scores} اسکورز ({layers} لیئرز × {batch} × {heads} ہیڈز × {seq}²)، "
            "ہر ایک تقریباً {per_score} بائٹس کا ({stored})، کل {value}، فی لیئر {layer}۔ SDPA "
            "کا فیوزڈ کرنل صرف اپنا آؤٹ پٹ اور ہر رو کا ایک fp32 log-sum-exp رکھتا ہے: کل "
            "{sdpa_acts}، جبکہ eager میں {eager_acts}۔ اسکورز ہر کوئری ہیڈ کے ہوتے ہیں، اس لیے "
            "گروپڈ کوئری اٹینشن انہیں چھوٹا نہیں کرتی، اور یہ s² کے ساتھ بڑھتے ہیں: دگنی "
            "سیکوئنس پر چار گنا بائٹس (Korthikanti et al. 2022 کی 5as/h اصطلاح)۔",
            parts={
                "stored": "وہ جو softmax{dropout} اور V کے ساتھ ضرب بیک ورڈ کے لیے محفوظ کرتے "
                "ہیں، انہی dtypes میں جو اس ماڈل کا اٹینشن کوڈ استعمال کرتا ہے",
                "dropout": "، اٹینشن ڈراپ آؤٹ (اس کا ماسک اور آؤٹ پٹ)",
            },
        ),
    },
    "offload-pinned-host": {
        Lang.en: Template(
            prompt="You train {ctx} with ZeRO-2 over the {ranks} GPUs of one {gpu} node and "
            "offload the optimizer to CPU (ZeRO-Offload: optimizer states, fp32 master "
            "weights and the optimizer step on the CPU). How much pinned host RAM does the "
            "node need for the offloaded states?",
            explanation="Each rank moves its 1/{ranks} shard of the optimizer states and "
            "master weights to host RAM, and keeps a host copy of its gradient shard for the "
            "CPU optimizer to read: {per_rank} per rank. The node holds all {ranks} ranks' "
            "shards: {value}, about {per_param} bytes per parameter of the whole model, "
            "however many ranks share the node. memcalc counts this as pinned (page-locked) "
            "memory, as DeepSpeed's offload_optimizer.pin_memory and torch's "
            "save_on_cpu(pin_memory=True) allocate it, so the GPU can copy it by DMA at the "
            "link's full speed; pinned pages cannot be swapped out, so they must fit in the "
            "node's {host_memory} of RAM beside everything else.",
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو ایک {gpu} نوڈ کے {ranks} GPUs پر ZeRO-2 کے ساتھ ٹرین کرتے ہیں "
            "اور آپٹیمائزر کو CPU پر آف لوڈ کرتے ہیں (ZeRO-Offload: آپٹیمائزر اسٹیٹس، fp32 "
            "ماسٹر ویٹس اور آپٹیمائزر اسٹیپ CPU پر)۔ آف لوڈ کی گئی اسٹیٹس کے لیے نوڈ کو کتنی "
            "پنڈ ہوسٹ RAM چاہیے؟",
            explanation="ہر رینک آپٹیمائزر اسٹیٹس اور ماسٹر ویٹس کا اپنا 1/{ranks} حصہ ہوسٹ RAM "
            "میں لے جاتا ہے، اور اپنے گریڈینٹ شارڈ کی ایک ہوسٹ کاپی رکھتا ہے جسے CPU آپٹیمائزر "
            "پڑھتا ہے: فی رینک {per_rank}۔ نوڈ تمام {ranks} رینکس کے شارڈز رکھتا ہے: {value}، "
            "یعنی پورے ماڈل کے فی پیرامیٹر تقریباً {per_param} بائٹس، نوڈ پر رینک چاہے جتنے "
            "ہوں۔ memcalc اسے پنڈ (page-locked) میموری گنتا ہے، جیسے DeepSpeed کا "
            "offload_optimizer.pin_memory اور torch کا save_on_cpu(pin_memory=True) اسے بناتے "
            "ہیں، تاکہ GPU اسے DMA سے لنک کی پوری رفتار پر کاپی کر سکے؛ پنڈ صفحات سواپ نہیں ہو "
            "سکتے، اس لیے انہیں باقی سب کے ساتھ نوڈ کی {host_memory} RAM میں سمانا ہوتا ہے۔",
        ),
    },
}
"""Prompt and explanation of each question on memory beyond the four components."""

LABELS: dict[Lang, dict[str, str]] = {Lang.en: {}, Lang.ur: {}}
"""These questions' options are sizes: no labels."""

MISTAKES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "alloc.with_overhead": "That is the whole estimated peak, overhead included; the CUDA "
        "context and library workspaces ({overhead}) are outside the allocator, so nvidia-smi "
        "counts them and max_memory_allocated does not.",
        "alloc.with_reserve": "That adds memcalc's {reserve} reserve: room kept free for the "
        "allocator's cache and fragmentation, not tensors the step allocates.",
        "alloc.sum": "That adds the four components as if they all lived at once; "
        "max_memory_allocated reports the largest single moment.",
        "alloc.usable": "That is the usable limit ({gpu_memory} less the reserve), not what the "
        "step allocates.",
        "fp8.all_halved": "That halves every saved tensor; fp8 shrinks only the linear layers' "
        "saved inputs, the rest keep bf16 or fp32.",
        "fp8.unchanged": "That is bf16-mixed's figure; fp8 keeps each linear layer's saved "
        "input in 1 byte instead of 2.",
        "accum.whole_batch": "That is the peak of one micro-batch of {big_batch}; with "
        "accumulation only one micro-batch of {batch} holds activations at a time.",
        "accum.all_micro_acts": "That keeps all {steps} micro-batches' activations at once; "
        "each is freed by its own backward before the next forward.",
        "accum.grads_per_micro": "That gives each micro-batch its own gradients; they "
        "accumulate in place in one set ({grads_b}).",
        "attn.one_layer": "That is one layer's scores; each of the {layers} layers keeps its own.",
        "attn.kv_heads": "That counts the scores per key/value head; grouped-query attention "
        "shares K and V between the {heads} query heads, but every query head has its own "
        "s × s scores.",
        "attn.one_bf16_copy": "That counts the scores once, at 2 bytes each; eager attention "
        "keeps about {per_score} bytes per score here.",
        "attn.eager_total": "That is eager attention's whole activation memory; SDPA keeps "
        "{sdpa_acts} of it too, and the question asks for the difference.",
        "host.one_rank": "That is one rank's share; the node's {ranks} ranks each pin their own.",
        "host.unsharded": "That has every rank offload the whole optimizer; under ZeRO each "
        "rank offloads only its 1/{ranks} shard.",
        "host.forgot_grads": "That leaves out the host copy of the gradients the CPU optimizer "
        "reads ({grads_rank} per rank).",
    },
    Lang.ur: {
        "alloc.with_overhead": "یہ اوورہیڈ سمیت پوری متوقع پیک ہے؛ CUDA کانٹیکسٹ اور "
        "لائبریری ورک اسپیسز ({overhead}) ایلوکیٹر سے باہر ہیں، اس لیے nvidia-smi انہیں گنتا "
        "ہے اور max_memory_allocated نہیں۔",
        "alloc.with_reserve": "یہ memcalc کا {reserve} ریزرو بھی جوڑتا ہے: ایلوکیٹر کے کیش اور "
        "فریگمنٹیشن کے لیے خالی رکھی جگہ، وہ ٹینسرز نہیں جو اسٹیپ بناتا ہے۔",
        "alloc.sum": "یہ چاروں حصے ایسے جمع کرتا ہے جیسے سب ایک ساتھ موجود ہوں؛ "
        "max_memory_allocated سب سے بھاری ایک لمحہ بتاتا ہے۔",
        "alloc.usable": "یہ قابلِ استعمال حد ہے ({gpu_memory} میں سے ریزرو نکال کر)، وہ نہیں جو "
        "اسٹیپ ایلوکیٹ کرتا ہے۔",
        "fp8.all_halved": "یہ ہر محفوظ ٹینسر کو آدھا کر دیتا ہے؛ fp8 صرف لینیئر لیئرز کے محفوظ "
        "ان پٹ چھوٹے کرتا ہے، باقی bf16 یا fp32 میں رہتے ہیں۔",
        "fp8.unchanged": "یہ bf16-mixed والا عدد ہے؛ fp8 ہر لینیئر لیئر کا محفوظ ان پٹ 2 کی جگہ "
        "1 بائٹ میں رکھتا ہے۔",
        "accum.whole_batch": "یہ {big_batch} کے ایک مائیکرو بیچ کی پیک ہے؛ ایکیومولیشن میں ایک "
        "وقت میں صرف {batch} کے ایک مائیکرو بیچ کی ایکٹیویشنز ہوتی ہیں۔",
        "accum.all_micro_acts": "یہ تمام {steps} مائیکرو بیچز کی ایکٹیویشنز ایک ساتھ رکھتا ہے؛ "
        "ہر ایک کی ایکٹیویشنز اگلے فارورڈ سے پہلے اس کے اپنے بیک ورڈ میں خالی ہو جاتی ہیں۔",
        "accum.grads_per_micro": "یہ ہر مائیکرو بیچ کے الگ گریڈینٹس رکھتا ہے؛ گریڈینٹس ایک ہی "
        "سیٹ ({grads_b}) میں جمع ہوتے ہیں۔",
        "attn.one_layer": "یہ ایک لیئر کے اسکورز ہیں؛ {layers} لیئرز میں سے ہر ایک اپنے رکھتی ہے۔",
        "attn.kv_heads": "یہ اسکورز کو ہر کی/ویلیو ہیڈ کے حساب سے گنتا ہے؛ گروپڈ کوئری اٹینشن K "
        "اور V کو {heads} کوئری ہیڈز میں بانٹتی ہے، مگر ہر کوئری ہیڈ کے اپنے s × s اسکورز "
        "ہوتے ہیں۔",
        "attn.one_bf16_copy": "یہ اسکورز کو ایک بار، ہر ایک 2 بائٹس پر گنتا ہے؛ یہاں eager "
        "اٹینشن فی اسکور تقریباً {per_score} بائٹس رکھتی ہے۔",
        "attn.eager_total": "یہ eager اٹینشن کی پوری ایکٹیویشن میموری ہے؛ اس میں سے "
        "{sdpa_acts} تو SDPA بھی رکھتا ہے، اور سوال فرق کا ہے۔",
        "host.one_rank": "یہ ایک رینک کا حصہ ہے؛ نوڈ کے {ranks} رینکس میں سے ہر ایک اپنا حصہ "
        "پن کرتا ہے۔",
        "host.unsharded": "اس میں ہر رینک پورا آپٹیمائزر آف لوڈ کرتا ہے؛ ZeRO میں ہر رینک صرف "
        "اپنا 1/{ranks} شارڈ آف لوڈ کرتا ہے۔",
        "host.forgot_grads": "اس میں گریڈینٹس کی وہ ہوسٹ کاپی شامل نہیں جسے CPU آپٹیمائزر پڑھتا "
        "ہے (فی رینک {grads_rank})۔",
    },
}
"""What each distractor of these questions stands for."""


FIT_RULES: dict[str, dict[Lang, str]] = {
    "replayed": {
        Lang.en: "memcalc replays torch's caching allocator over the step to count them: here "
        "it reserves {reserved} ({fragmentation} beside the tensors alive at that moment), and "
        "the step fits when the replay finishes within {usable}.",
        Lang.ur: "memcalc اسٹیپ پر torch کے کیشنگ ایلوکیٹر کو دوبارہ چلا کر انہیں گنتا ہے: "
        "یہاں وہ {reserved} ریزرو کرتا ہے (اس لمحے زندہ ٹینسرز کے علاوہ {fragmentation})، اور "
        "اسٹیپ تب فٹ ہے جب یہ ری پلے {usable} کے اندر مکمل ہو۔",
    },
    "not_replayed": {
        Lang.en: "memcalc replays torch's caching allocator over the step to count them where "
        "it can; this layout it cannot replay yet, so it keeps {reserve} ({headroom} of "
        "{gpu_memory}, --headroom) free for them and calls a step fitting only when its peak "
        "stays within {usable}.",
        Lang.ur: "memcalc جہاں ممکن ہو اسٹیپ پر torch کے کیشنگ ایلوکیٹر کو دوبارہ چلا کر "
        "انہیں گنتا ہے؛ اس لے آؤٹ کو وہ ابھی ری پلے نہیں کر سکتا، اس لیے ان کے لیے {reserve} "
        "({gpu_memory} کا {headroom}، --headroom) خالی رکھتا ہے اور اسٹیپ کو تب ہی فٹ مانتا ہے "
        "جب اس کی پیک {usable} کے اندر رہے۔",
    },
}
"""How the verdict is reached, in the allocated-vs-reserved explanation: by the replay where
the layout is replayed, by the --headroom reserve where it is not."""
