"""English and Urdu words of the LoRA / QLoRA questions (``kinds_finetune.py``).

Sources the explanations name: LoRA, Hu et al. 2021 (A is r x n_in, B is n_out x r); QLoRA,
Dettmers et al. 2023, sec. 3 "Double Quantization": an fp32 absmax per 64 weights costs
32/64 = 0.5 bits per weight, quantizing the absmax to 8 bits in blocks of 256 brings it to
8/64 + 32/(64 x 256) = 0.127 bits. In bytes (bitsandbytes ``functional.quantize_4bit``,
``compress_statistics=True`` calls ``quantize_blockwise(absmax, blocksize=256)``): NF4 is
0.5 + 4/64 = 0.5625 bytes per weight, NF4 with double quantization 0.5 + 1/64 + 4/16384
= 0.51587 bytes, plus a few fixed bytes per tensor (the code tables).
"""

from __future__ import annotations

from memcalc.quiz.bank import Lang
from memcalc.quiz.template import Template

TEMPLATES: dict[str, dict[Lang, Template]] = {
    "lora-trainable": {
        Lang.en: Template(
            prompt="You fine-tune {model} ({frozen} parameters) with LoRA: rank r = {rank} on "
            "{targets}, the base frozen. What share of all the parameters (base + adapters) "
            "does training update?",
            explanation="Each adapted weight W (n_in → n_out) gets two small matrices, A (r × "
            "n_in) and B (n_out × r): r × (n_in + n_out) parameters. {example_sentence}In all "
            "{trainable} of {total} parameters are trained: {value}. The other {frozen} are "
            "frozen: no gradient, no optimizer state. The adapters' gradients and optimizer "
            "states take only {states}.",
            parts={
                "example": "For {example} ({n_in} → {n_out}) that is {rank} × ({n_in} + "
                "{n_out}) = {per_matrix} per layer. ",
                "no_example": "",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {model} ({frozen} پیرامیٹرز) کو LoRA سے فائن ٹیون کرتے ہیں: رینک "
            "r = {rank}، {targets} پر، بیس ماڈل منجمد۔ ٹریننگ تمام پیرامیٹرز (بیس + اڈاپٹرز) "
            "کے کتنے حصے کو اپڈیٹ کرتی ہے؟",
            explanation="ہر اڈاپٹ کیے گئے ویٹ W (n_in → n_out) کے ساتھ دو چھوٹے میٹرکس لگتے ہیں، "
            "A (r × n_in) اور B (n_out × r): کل r × (n_in + n_out) پیرامیٹرز۔ "
            "{example_sentence}کل {total} میں سے {trainable} پیرامیٹرز ٹرین ہوتے ہیں: {value}۔ "
            "باقی {frozen} منجمد رہتے ہیں: نہ ان کا گریڈینٹ بنتا ہے نہ آپٹیمائزر اسٹیٹ۔ "
            "اڈاپٹرز کے گریڈینٹس اور آپٹیمائزر اسٹیٹس صرف {states} لیتے ہیں۔",
            parts={
                "example": "{example} ({n_in} → {n_out}) کے لیے یہ فی لیئر {rank} × ({n_in} + "
                "{n_out}) = {per_matrix} بنتے ہیں۔ ",
                "no_example": "",
            },
        ),
    },
    "lora-states": {
        Lang.en: Template(
            prompt="You fine-tune {ctx} with LoRA (r = {rank} on {targets}, adapters in "
            "{adapter_dtype}). How much GPU memory do the gradients and the optimizer states "
            "take?",
            explanation="Only the {trainable} adapter parameters have a gradient and optimizer "
            "states: gradients + optimizer states: {sum}. {master_sentence}Full fine-tuning of "
            "the same model would need {full} for them. The frozen weights themselves still "
            "take {weights}.",
            parts={
                "no_master": "The adapters are already fp32, so {precision} keeps no master "
                "copy of them. ",
                "master": "The optimizer's share includes an fp32 master copy of the adapters "
                "({master}). ",
                "none": "",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو LoRA سے فائن ٹیون کرتے ہیں (r = {rank}، {targets} پر، اڈاپٹرز "
            "{adapter_dtype} میں)۔ گریڈینٹس اور آپٹیمائزر اسٹیٹس GPU کی کتنی میموری لیتے ہیں؟",
            explanation="گریڈینٹ اور آپٹیمائزر اسٹیٹس صرف اڈاپٹرز کے {trainable} پیرامیٹرز "
            "کے ہوتے ہیں: گریڈینٹس + آپٹیمائزر اسٹیٹس: {sum}۔ {master_sentence}اسی ماڈل کی "
            "مکمل فائن ٹیوننگ میں ان کے لیے {full} درکار ہوتے۔ منجمد ویٹس خود اب بھی {weights} "
            "لیتے ہیں۔",
            parts={
                "no_master": "اڈاپٹرز پہلے ہی fp32 میں ہیں، اس لیے {precision} ان کی کوئی ماسٹر "
                "کاپی نہیں رکھتا۔ ",
                "master": "آپٹیمائزر کے حصے میں اڈاپٹرز کی fp32 ماسٹر کاپی ({master}) بھی شامل "
                "ہے۔ ",
                "none": "",
            },
        ),
    },
    "lora-activations": {
        Lang.en: Template(
            prompt="Without recompute, full fine-tuning of {ctx} keeps {full_acts} of "
            "activations for backward. How much does LoRA fine-tuning (r = {rank} on "
            "{targets}{base_words}) of the same batch keep?",
            explanation="{compared}, not {share} of it. LoRA trains few parameters, but the "
            "gradient still has to flow back through "
            "every frozen layer to reach the adapters below, so each layer keeps what its "
            "input gradient needs. A frozen weight needs no weight gradient (xᵀ·dy), so an "
            "input kept only for that one is dropped, while each adapter keeps its own small "
            "input. {kbit_sentence}To shrink activations, recompute them.",
            parts={
                "close": "{value}: close to full fine-tuning's {full_acts}",
                "more": "{value}: more than full fine-tuning's {full_acts}",
                "quantized_base": ", base in {quant}",
                "plain": "",
                "kbit": "Here prepare_model_for_kbit_training (PEFT's default for a quantized "
                "base) also runs the unquantized layers in fp32 and makes the embedding output "
                "require grad, which keeps more. ",
            },
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ کے بغیر، {ctx} کی مکمل فائن ٹیوننگ بیک ورڈ کے لیے {full_acts} "
            "ایکٹیویشنز رکھتی ہے۔ اسی بیچ کی LoRA فائن ٹیوننگ (r = {rank}، {targets} پر"
            "{base_words}) کتنی رکھتی ہے؟",
            explanation="{compared}، اس کا {share} نہیں۔ LoRA بہت کم پیرامیٹرز ٹرین کرتا ہے، "
            "مگر گریڈینٹ کو نیچے کے اڈاپٹرز تک پہنچنے کے "
            "لیے ہر منجمد لیئر سے گزرنا پڑتا ہے، اس لیے ہر لیئر وہ سب رکھتی ہے جو اس کے ان پٹ "
            "گریڈینٹ کو چاہیے۔ منجمد ویٹ کا گریڈینٹ (xᵀ·dy) نہیں بنتا، اس لیے جو ان پٹ صرف اسی "
            "کے لیے رکھا جاتا وہ چھوٹ جاتا ہے، جبکہ ہر اڈاپٹر اپنا چھوٹا سا ان پٹ رکھتا ہے۔ "
            "{kbit_sentence}ایکٹیویشنز گھٹانی ہوں تو ری کمپیوٹ کیجیے۔",
            parts={
                "close": "{value}: مکمل فائن ٹیوننگ کے {full_acts} کے قریب",
                "more": "{value}: مکمل فائن ٹیوننگ کے {full_acts} سے زیادہ",
                "quantized_base": "، بیس {quant} میں",
                "plain": "",
                "kbit": "یہاں prepare_model_for_kbit_training (کوانٹائزڈ بیس کے لیے PEFT کا "
                "ڈیفالٹ) غیر کوانٹائزڈ لیئرز کو fp32 میں چلاتا ہے اور ایمبیڈنگ کے آؤٹ پٹ پر "
                "requires_grad لگا دیتا ہے، جس سے میموری اور بڑھتی ہے۔ ",
            },
        ),
    },
    "qlora-base-bytes": {
        Lang.en: Template(
            prompt="QLoRA stores the {quantized} weights of {model}'s {tensors} linear-layer "
            "matrices in {quant} (bitsandbytes). How much GPU memory do these quantized "
            "weights take?",
            explanation="{storage_sentence}In all {value}, against {sixteen} in 16-bit. "
            "{unquantized_sentence}",
            parts={
                "nf4": "{quant} keeps a 4-bit code per weight (0.5 bytes) and one fp32 absmax per "
                "block of 64 weights (4/64 = 1/16 bytes): 0.5 + 1/16 = {per_param} bytes per "
                "weight, plus a 16-entry code table per tensor (bitsandbytes "
                "quantize_4bit, blocksize 64). ",
                "nf4_dq": "NF4 with double quantization keeps a 4-bit code per weight (0.5 "
                "bytes) and quantizes each block's absmax to 8 bits, with one fp32 scale per "
                "256 blocks: 0.5 + 1/64 + 4/16384 ≈ {per_param} bytes per weight (QLoRA "
                "sec. 3: 0.127 bits per weight for the constants instead of 0.5; bitsandbytes "
                "quantize_4bit with compress_statistics). ",
                "int8": "LLM.int8 keeps 1 byte per weight and one fp32 scale per output row "
                "(bitsandbytes Linear8bitLt): about {per_param} byte per weight. ",
                "unquantized": "The {kinds} are not quantized and take {frozen_b} more.",
                "unquantized_experts": "Not quantized: the routed experts ({experts_b}; fused "
                "nn.Parameters, which bitsandbytes leaves alone) and the {kinds} ({others_b}).",
            },
        ),
        Lang.ur: Template(
            prompt="QLoRA میں {model} کی {tensors} لینیئر لیئر میٹرکسز کے {quantized} ویٹس "
            "{quant} (bitsandbytes) میں رکھے جاتے ہیں۔ یہ کوانٹائزڈ ویٹس GPU کی کتنی میموری "
            "لیتے ہیں؟",
            explanation="{storage_sentence}کل {value}، جبکہ 16-bit میں یہ {sixteen} ہوتے۔ "
            "{unquantized_sentence}",
            parts={
                "nf4": "{quant} ہر ویٹ کا 4-bit کوڈ (0.5 بائٹ) رکھتا ہے اور 64 ویٹس کے ہر بلاک کا "
                "ایک fp32 absmax (4/64 = 1/16 بائٹ): فی ویٹ 0.5 + 1/16 = {per_param} بائٹس، "
                "ساتھ ہر ٹینسر کی 16 اندراجات والی کوڈ ٹیبل (bitsandbytes کا quantize_4bit، "
                "بلاک سائز 64)۔ ",
                "nf4_dq": "ڈبل کوانٹائزیشن والا NF4 ہر ویٹ کا 4-bit کوڈ (0.5 بائٹ) رکھتا ہے اور "
                "ہر بلاک کے absmax کو 8 بٹس میں کوانٹائز کرتا ہے، ہر 256 بلاکس کے لیے ایک fp32 "
                "اسکیل کے ساتھ: فی ویٹ 0.5 + 1/64 + 4/16384 ≈ {per_param} بائٹس (QLoRA، "
                "سیکشن 3: کانسٹنٹس کے لیے فی ویٹ 0.5 کی جگہ 0.127 بٹس؛ bitsandbytes کا "
                "quantize_4bit، compress_statistics کے ساتھ)۔ ",
                "int8": "LLM.int8 ہر ویٹ کا 1 بائٹ اور ہر آؤٹ پٹ رو کا ایک fp32 اسکیل رکھتا ہے "
                "(bitsandbytes کا Linear8bitLt): فی ویٹ تقریباً {per_param} بائٹ۔ ",
                "unquantized": "{kinds} کوانٹائز نہیں ہوتے اور مزید {frozen_b} لیتے ہیں۔",
                "unquantized_experts": "کوانٹائز نہیں ہوتے: روٹڈ ایکسپرٹس ({experts_b}؛ فیوزڈ "
                "nn.Parameter، جنہیں bitsandbytes نہیں چھیڑتا) اور {kinds} ({others_b})۔",
            },
        ),
    },
    "qlora-largest": {
        Lang.en: Template(
            prompt="Without recompute, which part of QLoRA fine-tuning {ctx} (r = {rank} on "
            "{targets}, base in {quant}) takes the most GPU memory?",
            explanation="In memory: {parts}. Largest: {largest} ({largest_b}). {lesson}"
            "{experts_sentence}{checkpointing_sentence}",
            parts={
                "lesson.base": "Even at 4 bits the quantized base is the largest part here. ",
                "lesson.experts": "",
                "lesson.frozen": "The weights bitsandbytes leaves unquantized outweigh the "
                "quantized ones here. ",
                "lesson.adapters": "The adapters with their gradients and optimizer states are "
                "the largest part here: many targets or a high rank. ",
                "lesson.activations": "Quantizing shrinks the base and the adapters are tiny, "
                "so the activations are what is left to fight. ",
                "experts": "The routed experts ({experts_b}) are fused nn.Parameters, not "
                "nn.Linear modules: bitsandbytes quantizes only nn.Linear, and PEFT's LoRA "
                "leaves them frozen unless a target names them{upcast}. ",
                "upcast": "; prepare_model_for_kbit_training upcasts every unquantized parameter, "
                "so they are fp32",
                "checkpointing": "With full recompute (gradient checkpointing, which "
                "prepare_model_for_kbit_training turns on by default) the activations would "
                "be {checkpointed}.",
            },
        ),
        Lang.ur: Template(
            prompt="ری کمپیوٹ کے بغیر، {ctx} کی QLoRA فائن ٹیوننگ (r = {rank}، {targets} پر، "
            "بیس {quant} میں) میں GPU کی سب سے زیادہ میموری کون سا حصہ لیتا ہے؟",
            explanation="میموری میں: {parts}۔ سب سے بڑا حصہ: {largest} ({largest_b})۔ {lesson}"
            "{experts_sentence}{checkpointing_sentence}",
            parts={
                "lesson.base": "4 بٹس میں بھی کوانٹائزڈ بیس یہاں سب سے بڑا حصہ ہے۔ ",
                "lesson.experts": "",
                "lesson.frozen": "یہاں وہ ویٹس جنہیں bitsandbytes کوانٹائز نہیں کرتا، کوانٹائزڈ "
                "ویٹس سے بھاری ہیں۔ ",
                "lesson.adapters": "یہاں اڈاپٹرز اپنے گریڈینٹس اور آپٹیمائزر اسٹیٹس سمیت سب سے "
                "بڑا حصہ ہیں: بہت سے ٹارگٹس یا بڑا رینک۔ ",
                "lesson.activations": "کوانٹائزیشن بیس کو چھوٹا کر دیتی ہے اور اڈاپٹرز بہت چھوٹے "
                "ہیں، اس لیے ایکٹیویشنز ہی رہ جاتی ہیں جن سے نمٹنا ہو۔ ",
                "experts": "روٹڈ ایکسپرٹس ({experts_b}) فیوزڈ nn.Parameter ہیں، nn.Linear ماڈیول "
                "نہیں: bitsandbytes صرف nn.Linear کو کوانٹائز کرتا ہے، اور PEFT کا LoRA انہیں "
                "منجمد رہنے دیتا ہے جب تک کوئی ٹارگٹ ان کا نام نہ لے{upcast}۔ ",
                "upcast": "؛ prepare_model_for_kbit_training ہر غیر کوانٹائزڈ پیرامیٹر کو fp32 "
                "میں بدل دیتا ہے، اس لیے یہ fp32 میں ہیں",
                "checkpointing": "فل ری کمپیوٹ (گریڈینٹ چیک پوائنٹنگ، جسے "
                "prepare_model_for_kbit_training ڈیفالٹ طور پر آن کرتا ہے) کے ساتھ ایکٹیویشنز "
                "{checkpointed} ہوتیں۔",
            },
        ),
    },
}
"""Prompt and explanation of each LoRA / QLoRA question, by kind and language."""

LABELS: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "lora.all_linear": "every linear layer (all-linear)",
        "qlora.base": "The quantized base weights ({quant})",
        "qlora.experts": "The routed experts' weights (fused, left unquantized)",
        "qlora.frozen": "The unquantized weights ({kinds})",
        "qlora.adapters": "The adapters with their gradients and optimizer states",
        "qlora.activations": "The activations saved for backward",
        "term.qlora.base": "quantized base weights",
        "term.qlora.experts": "routed experts' weights",
        "term.qlora.frozen": "unquantized {kinds}",
        "frozen.embeddings": "embeddings",
        "frozen.norms": "norms",
        "frozen.lm_head": "LM head",
        "frozen.biases": "biases",
        "frozen.routers": "routers",
        "part_size": "{part} {size}",
        "takes.base": "take",
        "takes.experts": "take",
        "takes.frozen": "take",
        "takes.adapters": "take",
        "takes.activations": "take",
        "term.qlora.adapters": "adapters with their gradients and states",
        "term.qlora.activations": "activations",
    },
    Lang.ur: {
        "lora.all_linear": "ہر لینیئر لیئر (all-linear)",
        "qlora.base": "کوانٹائزڈ بیس ویٹس ({quant})",
        "qlora.experts": "روٹڈ ایکسپرٹس کے ویٹس (فیوزڈ، غیر کوانٹائزڈ)",
        "qlora.frozen": "غیر کوانٹائزڈ ویٹس ({kinds})",
        "qlora.adapters": "اڈاپٹرز، اپنے گریڈینٹس اور آپٹیمائزر اسٹیٹس سمیت",
        "qlora.activations": "بیک ورڈ کے لیے محفوظ ایکٹیویشنز",
        "term.qlora.base": "کوانٹائزڈ بیس ویٹس",
        "term.qlora.experts": "روٹڈ ایکسپرٹس کے ویٹس",
        "term.qlora.frozen": "غیر کوانٹائزڈ {kinds}",
        "frozen.embeddings": "ایمبیڈنگز",
        "frozen.norms": "نارمز",
        "frozen.lm_head": "LM ہیڈ",
        "frozen.biases": "بائسز",
        "frozen.routers": "راؤٹرز",
        "part_size": "{part} {size}",
        "takes.base": "لیتے ہیں",
        "takes.experts": "لیتے ہیں",
        "takes.frozen": "لیتے ہیں",
        "takes.adapters": "لیتے ہیں",
        "takes.activations": "لیتی ہیں",
        "term.qlora.adapters": "اڈاپٹرز اور ان کی اسٹیٹس",
        "term.qlora.activations": "ایکٹیویشنز",
    },
}
"""Option labels of the LoRA / QLoRA questions."""

MISTAKES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "lora.all_linear": "That is the share with adapters on every linear layer "
        "(all-linear); here only {targets} are adapted.",
        "lora.rank_over_width": "That is r / hidden size ({rank} / {hidden}): one adapter's "
        "width against one layer's, not the parameters trained against the whole model.",
        "lora.a_only": "That counts only the A matrices (r × n_in); each adapter also has B "
        "(n_out × r), r × (n_in + n_out) in all.",
        "lora.one_layer": "That is one layer's adapters; each of the {layers} layers has its own.",
        "lora.bytes_share": "That is the adapters' share of the weights' bytes ({adapter_dtype} "
        "adapters beside a base in other dtypes), not their share of the parameters.",
        "lora.frozen_share": "That is the frozen share: the base weights LoRA leaves as they are.",
        "lora.everything": "That is full fine-tuning; LoRA freezes the base and trains only "
        "the adapters.",
        "lora.full_states": "That is full fine-tuning's gradients and optimizer states; "
        "under LoRA the frozen base has neither.",
        "lora.master": "That adds a 4-byte master copy per adapter parameter; the adapters "
        "are already fp32, so there is none.",
        "lora.forgot_grads": "That is the optimizer states alone; the adapters' gradients "
        "({grads}) come on top.",
        "lora.with_weights": "That adds the frozen weights ({weights}); the question asks "
        "for the gradients and optimizer states.",
        "lora.acts_scaled": "That scales the activations by the trained share ({share}); "
        "every frozen layer still keeps what backward needs to pass the gradient down.",
        "lora.acts_same": "That is full fine-tuning's figure; a frozen weight needs no "
        "weight gradient, so the inputs kept only for one are dropped: a little less.",
        "lora.acts_kbit": "That is full fine-tuning's figure; prepare_model_for_kbit_training "
        "runs the unquantized layers in fp32 and keeps the first layer's input: more.",
        "qlora.forgot_absmax": "That is the 4-bit codes alone (0.5 bytes per weight); each "
        "block of 64 also keeps an absmax.",
        "qlora.as_16bit": "That is the 16-bit size (2 bytes per weight): the base before "
        "quantization.",
        "qlora.as_int8": "That is LLM.int8 storage (about 1 byte per weight), not {quant}.",
        "qlora.double_quant": "That is NF4 with double quantization (8-bit absmax, about "
        "0.516 bytes per weight); plain {quant} keeps an fp32 absmax per 64 weights.",
        "qlora.single_quant": "That keeps an fp32 absmax per 64 weights (0.5625 bytes per "
        "weight); double quantization stores it in 8 bits.",
        "qlora.as_nf4": "That is NF4 storage (0.5625 bytes per weight), not LLM.int8.",
        "qlora.smaller": "The {term} {takes} {size}; the {largest_term} {largest_takes} more "
        "({largest_b}).",
    },
    Lang.ur: {
        "lora.all_linear": "یہ ہر لینیئر لیئر (all-linear) پر اڈاپٹرز والا حصہ ہے؛ یہاں "
        "صرف {targets} اڈاپٹ ہوئے ہیں۔",
        "lora.rank_over_width": "یہ r / ہِڈن سائز ({rank} / {hidden}) ہے: ایک اڈاپٹر کی "
        "چوڑائی کا ایک لیئر سے موازنہ، پورے ماڈل کے مقابلے میں ٹرین ہونے والے پیرامیٹرز نہیں۔",
        "lora.a_only": "یہ صرف A میٹرکسز (r × n_in) گنتا ہے؛ ہر اڈاپٹر کا B (n_out × r) بھی "
        "ہوتا ہے، کل r × (n_in + n_out)۔",
        "lora.one_layer": "یہ ایک لیئر کے اڈاپٹرز ہیں؛ {layers} لیئرز میں سے ہر ایک کے اپنے ہیں۔",
        "lora.bytes_share": "یہ ویٹس کے بائٹس میں اڈاپٹرز کا حصہ ہے ({adapter_dtype} اڈاپٹرز، "
        "دوسرے dtype والے بیس کے ساتھ)، پیرامیٹرز میں ان کا حصہ نہیں۔",
        "lora.frozen_share": "یہ منجمد حصہ ہے: بیس ویٹس جنہیں LoRA جوں کا توں چھوڑ دیتا ہے۔",
        "lora.everything": "یہ مکمل فائن ٹیوننگ ہے؛ LoRA بیس کو منجمد کر کے صرف اڈاپٹرز "
        "ٹرین کرتا ہے۔",
        "lora.full_states": "یہ مکمل فائن ٹیوننگ کے گریڈینٹس اور آپٹیمائزر اسٹیٹس ہیں؛ LoRA "
        "میں منجمد بیس کا نہ گریڈینٹ ہوتا ہے نہ اسٹیٹ۔",
        "lora.master": "یہ ہر اڈاپٹر پیرامیٹر کی 4 بائٹس والی ماسٹر کاپی جوڑتا ہے؛ اڈاپٹرز "
        "پہلے ہی fp32 ہیں، اس لیے ماسٹر کاپی نہیں ہوتی۔",
        "lora.forgot_grads": "یہ صرف آپٹیمائزر اسٹیٹس ہیں؛ اڈاپٹرز کے گریڈینٹس ({grads}) "
        "ان کے علاوہ ہیں۔",
        "lora.with_weights": "اس میں منجمد ویٹس ({weights}) بھی جمع ہیں؛ سوال گریڈینٹس اور "
        "آپٹیمائزر اسٹیٹس کا ہے۔",
        "lora.acts_scaled": "یہ ایکٹیویشنز کو ٹرین ہونے والے حصے ({share}) سے ضرب دیتا ہے؛ "
        "ہر منجمد لیئر اب بھی وہ رکھتی ہے جو گریڈینٹ کو نیچے پہنچانے کے لیے بیک ورڈ کو چاہیے۔",
        "lora.acts_same": "یہ مکمل فائن ٹیوننگ والا عدد ہے؛ منجمد ویٹ کا گریڈینٹ نہیں بنتا، "
        "اس لیے جو ان پٹ صرف اسی کے لیے رکھے جاتے وہ چھوٹ جاتے ہیں: تھوڑی کم میموری۔",
        "lora.acts_kbit": "یہ مکمل فائن ٹیوننگ والا عدد ہے؛ prepare_model_for_kbit_training "
        "غیر کوانٹائزڈ لیئرز کو fp32 میں چلاتا ہے اور پہلی لیئر کا ان پٹ رکھتا ہے: زیادہ میموری۔",
        "qlora.forgot_absmax": "یہ صرف 4-bit کوڈز ہیں (فی ویٹ 0.5 بائٹ)؛ 64 ویٹس کا ہر بلاک "
        "ایک absmax بھی رکھتا ہے۔",
        "qlora.as_16bit": "یہ 16-bit سائز ہے (فی ویٹ 2 بائٹس): کوانٹائزیشن سے پہلے کا بیس۔",
        "qlora.as_int8": "یہ LLM.int8 کا سائز ہے (فی ویٹ تقریباً 1 بائٹ)، {quant} کا نہیں۔",
        "qlora.double_quant": "یہ ڈبل کوانٹائزیشن والا NF4 ہے (8-bit absmax، فی ویٹ تقریباً "
        "0.516 بائٹ)؛ سادہ {quant} ہر 64 ویٹس کا ایک fp32 absmax رکھتا ہے۔",
        "qlora.single_quant": "یہ ہر 64 ویٹس کا fp32 absmax رکھتا ہے (فی ویٹ 0.5625 بائٹ)؛ "
        "ڈبل کوانٹائزیشن اسے 8 بٹس میں رکھتی ہے۔",
        "qlora.as_nf4": "یہ NF4 کا سائز ہے (فی ویٹ 0.5625 بائٹ)، LLM.int8 کا نہیں۔",
        "qlora.smaller": "{term} {size} {takes}؛ {largest_term} ان سے زیادہ {largest_takes} "
        "({largest_b})۔",
    },
}
"""What each distractor of the LoRA / QLoRA questions stands for."""
