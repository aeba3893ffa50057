"""English and Urdu words of the mixture-of-experts questions (``kinds_moe.py``).

Sources: sparsely gated experts, top-k routing (Shazeer et al. 2017; Fedus et al. 2022,
Switch Transformers); a token's FLOPs are about 2 x active parameters per forward (Kaplan et
al. 2020, sec. 2.1, with N the active count).
"""

from __future__ import annotations

from memcalc.quiz.bank import Lang
from memcalc.quiz.template import Template

TEMPLATES: dict[str, dict[Lang, Template]] = {
    "moe-active": {
        Lang.en: Template(
            prompt="{model} has {total} parameters; each of its {moe_layers} MoE layers has "
            "{experts} routed experts, of which each token uses {top_k}. How many parameters "
            "does one token use (the active parameters)?",
            explanation="The routed experts hold {routed}; a token uses {top_k} of the "
            "{experts} in each MoE layer: {routed_active}. Every token also passes through "
            "the rest (attention, embeddings, norms, the routers{shared_note}): {shared}. "
            "Active: {value}. Compute follows the active count (this batch's forward is "
            "{forward}, about 2 × active × tokens = {dense_forward}); memory follows the "
            "total: every expert's weights, gradients and optimizer states stay on the GPU, "
            "whichever a token picks.",
            parts={"shared": ", the shared experts", "no_shared": ""},
        ),
        Lang.ur: Template(
            prompt="{model} میں {total} پیرامیٹرز ہیں؛ اس کی {moe_layers} MoE لیئرز میں سے ہر "
            "ایک میں {experts} روٹڈ ایکسپرٹس ہیں، جن میں سے ہر ٹوکن {top_k} استعمال کرتا ہے۔ "
            "ایک ٹوکن کتنے پیرامیٹرز استعمال کرتا ہے (ایکٹو پیرامیٹرز)؟",
            explanation="روٹڈ ایکسپرٹس میں {routed} پیرامیٹرز ہیں؛ ایک ٹوکن ہر MoE لیئر کے "
            "{experts} میں سے {top_k} استعمال کرتا ہے: {routed_active}۔ ہر ٹوکن باقی حصے سے "
            "بھی گزرتا ہے (اٹینشن، ایمبیڈنگز، نارمز، راؤٹرز{shared_note}): {shared}۔ ایکٹو: "
            "{value}۔ کمپیوٹ ایکٹو تعداد کے ساتھ چلتا ہے (اس بیچ کا فارورڈ {forward} ہے، "
            "تقریباً 2 × ایکٹو × ٹوکنز = {dense_forward})؛ میموری کل تعداد کے ساتھ: ہر ایکسپرٹ "
            "کے ویٹس، گریڈینٹس اور آپٹیمائزر اسٹیٹس GPU پر رہتے ہیں، ٹوکن چاہے کوئی بھی "
            "ایکسپرٹ چنے۔",
            parts={"shared": "، شیئرڈ ایکسپرٹس", "no_shared": ""},
        ),
    },
    "moe-states": {
        Lang.en: Template(
            prompt="You train {ctx} on one GPU: {total} parameters, {active} of them active "
            "per token. How much memory do the weights, gradients and optimizer states take?",
            explanation="Memory sees every parameter, not the active ones: each expert has its "
            "weights, gradient and optimizer states whichever experts the tokens pick. "
            "Weights + gradients + optimizer states: {sum}. Counted on the active parameters "
            "it would be {dense}: that is what the FLOPs see, not the memory. {zero_sentence}",
            parts={
                "zero3": "Sharded with ZeRO-3 over {gpus} GPUs it is {z3} per GPU (expert "
                "parallelism would spread the experts instead).",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو ایک GPU پر ٹرین کرتے ہیں: {total} پیرامیٹرز، جن میں سے فی ٹوکن "
            "{active} ایکٹو ہیں۔ ویٹس، گریڈینٹس اور آپٹیمائزر اسٹیٹس کتنی میموری لیتے ہیں؟",
            explanation="میموری ہر پیرامیٹر کو گنتی ہے، صرف ایکٹو کو نہیں: ہر ایکسپرٹ کے اپنے "
            "ویٹس، گریڈینٹ اور آپٹیمائزر اسٹیٹس ہوتے ہیں، ٹوکنز چاہے کوئی بھی ایکسپرٹ چنیں۔ "
            "ویٹس + گریڈینٹس + آپٹیمائزر اسٹیٹس: {sum}۔ صرف ایکٹو پیرامیٹرز پر گنیں تو یہ "
            "{dense} ہوتا: یہ FLOPs کا حساب ہے، میموری کا نہیں۔ {zero_sentence}",
            parts={
                "zero3": "{gpus} GPUs پر ZeRO-3 سے شارڈ کرنے پر یہ فی GPU {z3} ہے (ایکسپرٹ "
                "پیرالل ازم اس کی جگہ ایکسپرٹس کو GPUs میں بانٹ دیتا)۔",
            },
        ),
    },
    "expert-parallel-states": {
        Lang.en: Template(
            prompt="You train {ctx} with data parallelism over {ep} GPUs; every GPU keeps all "
            "{experts} routed experts of each MoE layer and {before} of weights, gradients and "
            "optimizer states. With expert parallelism over the same {ep} GPUs (ep = {ep}), how "
            "much do the model states take on each GPU?",
            explanation="Expert parallelism places E / ep = {per_rank} of the {experts} routed "
            "experts of every MoE layer on each GPU, and tokens travel to their experts and "
            "back by all-to-all. The routed experts are {routed_share} of the parameters; the "
            "rest (attention, embeddings, norms, the routers{shared_note}) stays replicated on "
            "every GPU, so the model states drop from {before} to {value}, not to 1/{ep}. The "
            "activations grow instead ({acts_whole} → {acts_split}): each GPU's experts take "
            "the tokens routed to them from all {ep} GPUs, and memcalc sizes their buffers for "
            "a load imbalance of {imbalance} (--moe-imbalance).",
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو {ep} GPUs پر ڈیٹا پیرالل ازم کے ساتھ ٹرین کرتے ہیں؛ ہر GPU ہر "
            "MoE لیئر کے تمام {experts} روٹڈ ایکسپرٹس رکھتا ہے اور ویٹس، گریڈینٹس اور آپٹیمائزر "
            "اسٹیٹس کے {before}۔ انہی {ep} GPUs پر ایکسپرٹ پیرالل ازم (ep = {ep}) کے ساتھ ہر "
            "GPU پر ماڈل اسٹیٹس کتنی میموری لیتی ہیں؟",
            explanation="ایکسپرٹ پیرالل ازم ہر MoE لیئر کے {experts} روٹڈ ایکسپرٹس میں سے "
            "E / ep = {per_rank} ہر GPU پر رکھتا ہے، اور ٹوکنز all-to-all کے ذریعے اپنے "
            "ایکسپرٹس تک جاتے اور واپس آتے ہیں۔ روٹڈ ایکسپرٹس پیرامیٹرز کا {routed_share} ہیں؛ "
            "باقی حصہ (اٹینشن، ایمبیڈنگز، نارمز، راؤٹرز{shared_note}) ہر GPU پر پورا رہتا ہے، "
            "اس لیے ماڈل اسٹیٹس {before} سے {value} رہ جاتی ہیں، 1/{ep} نہیں۔ اس کے بدلے "
            "ایکٹیویشنز بڑھتی ہیں ({acts_whole} → {acts_split}): ہر GPU کے ایکسپرٹس تمام {ep} "
            "GPUs سے اپنی طرف بھیجے گئے ٹوکنز لیتے ہیں، اور memcalc ان کے بفرز {imbalance} کے "
            "لوڈ عدم توازن کے لیے رکھتا ہے (--moe-imbalance)۔",
        ),
    },
}
"""Prompt and explanation of each mixture-of-experts question, by kind and language."""

LABELS: dict[Lang, dict[str, str]] = {Lang.en: {}, Lang.ur: {}}
"""The mixture-of-experts questions' options are counts and sizes: no labels."""

MISTAKES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "moe.total": "That is the total: every expert counts for memory, but a token uses "
        "only {top_k} of the {experts}.",
        "moe.e_copies": "That reads the model as {experts} copies of a dense one; the "
        "experts share attention and embeddings, only the MLPs are many.",
        "moe.scaled_all": "That scales every parameter by top_k / E; attention, embeddings "
        "and norms are used by every token.",
        "moe.top1": "That counts one expert per token; {model} sends each token to {top_k}.",
        "moe.forgot_shared": "That is the routed experts a token uses, alone; every token "
        "also passes through attention, embeddings and norms ({shared}).",
        "moe.states_active": "That counts the active parameters only; every expert keeps its "
        "weights, gradients and optimizer states.",
        "moe.weights_only": "That is the weights alone; the gradients ({g}) and optimizer "
        "states ({o}) come on top.",
        "ep.not_split": "That is plain data parallelism: every GPU keeps every expert.",
        "ep.all_divided": "That divides everything by ep = {ep}; expert parallelism splits only "
        "the routed experts, the rest stays whole on every GPU.",
        "ep.experts_only": "That counts only this GPU's experts; it also keeps the attention, "
        "embeddings, norms and routers, replicated.",
    },
    Lang.ur: {
        "moe.total": "یہ کل تعداد ہے: میموری میں ہر ایکسپرٹ گنا جاتا ہے، مگر ایک ٹوکن "
        "{experts} میں سے صرف {top_k} استعمال کرتا ہے۔",
        "moe.e_copies": "یہ ماڈل کو ایک ڈینس ماڈل کی {experts} کاپیاں سمجھتا ہے؛ ایکسپرٹس "
        "اٹینشن اور ایمبیڈنگز مشترک رکھتے ہیں، صرف MLPs کئی ہیں۔",
        "moe.scaled_all": "یہ ہر پیرامیٹر کو top_k / E سے ضرب دیتا ہے؛ اٹینشن، ایمبیڈنگز "
        "اور نارمز ہر ٹوکن استعمال کرتا ہے۔",
        "moe.top1": "یہ فی ٹوکن ایک ایکسپرٹ گنتا ہے؛ {model} ہر ٹوکن کو {top_k} ایکسپرٹس "
        "کے پاس بھیجتا ہے۔",
        "moe.forgot_shared": "یہ صرف وہ روٹڈ ایکسپرٹس ہیں جو ایک ٹوکن استعمال کرتا ہے؛ ہر "
        "ٹوکن اٹینشن، ایمبیڈنگز اور نارمز ({shared}) سے بھی گزرتا ہے۔",
        "moe.states_active": "یہ صرف ایکٹو پیرامیٹرز گنتا ہے؛ ہر ایکسپرٹ اپنے ویٹس، گریڈینٹس "
        "اور آپٹیمائزر اسٹیٹس رکھتا ہے۔",
        "moe.weights_only": "یہ صرف ویٹس ہیں؛ گریڈینٹس ({g}) اور آپٹیمائزر اسٹیٹس ({o}) ان "
        "کے علاوہ ہیں۔",
        "ep.not_split": "یہ سادہ ڈیٹا پیرالل ازم ہے: ہر GPU ہر ایکسپرٹ رکھتا ہے۔",
        "ep.all_divided": "یہ ہر چیز کو ep = {ep} سے تقسیم کرتا ہے؛ ایکسپرٹ پیرالل ازم صرف روٹڈ "
        "ایکسپرٹس کو بانٹتا ہے، باقی ہر GPU پر پورا رہتا ہے۔",
        "ep.experts_only": "یہ صرف اس GPU کے ایکسپرٹس گنتا ہے؛ یہ اٹینشن، ایمبیڈنگز، نارمز اور "
        "راؤٹرز بھی پورے رکھتا ہے۔",
    },
}
"""What each distractor of the mixture-of-experts questions stands for."""
