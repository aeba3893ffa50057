"""English and Urdu words of the questions on several GPUs (``kinds_parallel.py``).

Sources the explanations name: Megatron-LM tensor parallelism (Shoeybi et al. 2019) and its
activation count sbh(10 + 24/t + 5as/(ht)) per layer without sequence parallelism
(Korthikanti et al. 2022, sec. 4.2.2, eq. 3); ZeRO stages 1-3 (Rajbhandari et al. 2020,
sec. 5); the 1F1B schedule and its bubble (p - 1) / (m + p - 1) (Narayanan et al. 2021, sec.
2.2); context parallelism as ring attention (Liu et al. 2023).
"""

from __future__ import annotations

from memcalc.quiz.bank import Lang
from memcalc.quiz.template import Template

TEMPLATES: dict[str, dict[Lang, Template]] = {
    "tp-activations": {
        Lang.en: Template(
            prompt="On one GPU, training {ctx} without recompute keeps {base_acts} of "
            "activations. With tensor parallelism over t = {t} GPUs (Megatron, without "
            "sequence parallelism), how much does each GPU keep?",
            explanation="Tensor parallelism splits the attention heads and the MLP's inner "
            "width, so the tensors inside attention and the MLP divide by t = {t}. The norms' "
            "inputs, the dropout masks and the residual stream stay whole on every GPU "
            "(Korthikanti et al. 2022: sbh(10 + 24/t + 5as/(ht)) per layer), so the total "
            "divides by less than t: {value}. Sequence parallelism splits those along the "
            "sequence as well: {sp_acts}. The weights divide almost by t ({w_base} → {w_tp}).",
        ),
        Lang.ur: Template(
            prompt="ایک GPU پر، ری کمپیوٹ کے بغیر {ctx} کی ٹریننگ {base_acts} ایکٹیویشنز رکھتی "
            "ہے۔ t = {t} GPUs پر ٹینسر پیرالل ازم (Megatron، سیکوئنس پیرالل ازم کے بغیر) کے "
            "ساتھ ہر GPU کتنی رکھتا ہے؟",
            explanation="ٹینسر پیرالل ازم اٹینشن ہیڈز اور MLP کی اندرونی چوڑائی کو بانٹ دیتا "
            "ہے، اس لیے اٹینشن اور MLP کے اندر کے ٹینسرز t = {t} سے تقسیم ہو جاتے ہیں۔ نارمز "
            "کے ان پٹ، ڈراپ آؤٹ ماسک اور ریزیجوئل اسٹریم ہر GPU پر پورے رہتے ہیں "
            "(Korthikanti et al. 2022: فی لیئر sbh(10 + 24/t + 5as/(ht)))، اس لیے کل میموری t "
            "سے کم پر تقسیم ہوتی ہے: {value}۔ سیکوئنس پیرالل ازم انہیں بھی سیکوئنس کے ساتھ "
            "بانٹ دیتا ہے: {sp_acts}۔ ویٹس تقریباً پورے t سے تقسیم ہوتے ہیں ({w_base} → "
            "{w_tp})۔",
        ),
    },
    "zero-model-states": {
        Lang.en: Template(
            prompt="You train {ctx} with data parallelism over {gpus} GPUs and ZeRO stage "
            "{stage}. How much memory do the weights, gradients and optimizer states take "
            "on each GPU?",
            explanation="ZeRO-1 shards the optimizer states over the {gpus} ranks, ZeRO-2 the "
            "gradients too, ZeRO-3 the weights as well (Rajbhandari et al. 2020). Under "
            "ZeRO-{stage}, per GPU, weights + gradients + optimizer states: {sum}. Without "
            "sharding: {z0}; ZeRO-1: {z1}; ZeRO-3: {z3}. ZeRO does not shard activations: "
            "each rank keeps those of its own micro-batch. {tp_sentence}",
            parts={
                "tp": "Tensor parallelism over the same {gpus} GPUs would leave {tp_states} "
                "of model states and also split the activations ({dp_acts} → {tp_acts}), at "
                "the price of communication inside every layer.",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو {gpus} GPUs پر ڈیٹا پیرالل ازم اور ZeRO اسٹیج {stage} کے ساتھ "
            "ٹرین کرتے ہیں۔ ہر GPU پر ویٹس، گریڈینٹس اور آپٹیمائزر اسٹیٹس کتنی میموری لیتے ہیں؟",
            explanation="ZeRO-1 آپٹیمائزر اسٹیٹس کو {gpus} رینکس میں شارڈ کرتا ہے، ZeRO-2 "
            "گریڈینٹس کو بھی، اور ZeRO-3 ویٹس کو بھی (Rajbhandari et al. 2020)۔ ZeRO-{stage} "
            "میں فی GPU، ویٹس + گریڈینٹس + آپٹیمائزر اسٹیٹس: {sum}۔ شارڈنگ کے بغیر: {z0}؛ "
            "ZeRO-1: {z1}؛ ZeRO-3: {z3}۔ ZeRO ایکٹیویشنز کو شارڈ نہیں کرتا: ہر رینک اپنے "
            "مائیکرو بیچ کی ایکٹیویشنز رکھتا ہے۔ {tp_sentence}",
            parts={
                "tp": "انہی {gpus} GPUs پر ٹینسر پیرالل ازم سے ماڈل اسٹیٹس {tp_states} رہ جاتیں "
                "اور ایکٹیویشنز بھی بٹ جاتیں ({dp_acts} → {tp_acts})، مگر اس کی قیمت ہر لیئر "
                "کے اندر کمیونیکیشن ہے۔",
            },
        ),
    },
    "pp-first-stage": {
        Lang.en: Template(
            prompt="You train {ctx} on a pipeline of p = {p} stages ({stage_layers} blocks "
            "on the first), with m = {m} micro-batches per step on the 1F1B schedule. Without "
            "recompute, how much activation memory does the first stage hold at its first "
            "backward?",
            explanation="Under 1F1B, stage 0 runs p = {p} forwards before its first backward "
            "(the first micro-batch must reach the last stage and come back), so it holds "
            "{held} micro-batches of its own layers: {product}. That is about "
            "what the whole model keeps for one micro-batch ({base_acts}): 1/p of the layers "
            "for p micro-batches (Korthikanti et al. 2022, sec. 4.2.3). The last stage holds "
            "one micro-batch at a time ({last_acts}), so the first stage is the one to check.",
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو p = {p} اسٹیجز کی پائپ لائن پر ٹرین کرتے ہیں (پہلے اسٹیج پر "
            "{stage_layers} بلاکس)، 1F1B شیڈول پر ہر اسٹیپ میں m = {m} مائیکرو بیچز۔ ری "
            "کمپیوٹ کے بغیر، پہلا اسٹیج اپنے پہلے بیک ورڈ کے وقت کتنی ایکٹیویشن میموری رکھتا "
            "ہے؟",
            explanation="1F1B میں اسٹیج 0 اپنے پہلے بیک ورڈ سے پہلے p = {p} فارورڈ چلاتا ہے "
            "(پہلے مائیکرو بیچ کو آخری اسٹیج تک جا کر واپس آنا ہوتا ہے)، اس لیے وہ اپنی لیئرز "
            "کے {held} مائیکرو بیچز رکھتا ہے: {product}۔ یہ تقریباً اتنا ہے جتنا "
            "پورا ماڈل ایک مائیکرو بیچ کے لیے رکھتا ہے ({base_acts}): لیئرز کا 1/p حصہ، p "
            "مائیکرو بیچز کے لیے (Korthikanti et al. 2022، سیکشن 4.2.3)۔ آخری اسٹیج ایک وقت "
            "میں ایک ہی مائیکرو بیچ رکھتا ہے ({last_acts})، اس لیے جانچنا پہلے اسٹیج کو ہے۔",
        ),
    },
    "pp-bubble": {
        Lang.en: Template(
            prompt="{model} is split into a 1F1B pipeline of p = {p} stages, with m = {m} "
            "micro-batches per step. What share of the slowest stage's step time is the "
            "pipeline bubble (time a stage sits idle)?",
            explanation="While the pipeline fills and drains, each stage waits p − 1 = {p1} "
            "micro-batch slots and works for m = {m}: the bubble is (p − 1) / (m + p − 1) = "
            "{p1} / {mp1} = {value} (Narayanan et al. 2021). On {gpu} that is {bubble_time} "
            "idle against {busy_time} of work. With m = {m2} micro-batches it drops to "
            "{more}: more micro-batches per step, or interleaved stages, shrink the bubble.",
        ),
        Lang.ur: Template(
            prompt="{model} کو p = {p} اسٹیجز کی 1F1B پائپ لائن میں بانٹا گیا ہے، ہر اسٹیپ "
            "میں m = {m} مائیکرو بیچز۔ سب سے سست اسٹیج کے اسٹیپ کے وقت کا کتنا حصہ پائپ لائن "
            "ببل ہے (وہ وقت جب اسٹیج خالی بیٹھا رہتا ہے)؟",
            explanation="پائپ لائن کے بھرنے اور خالی ہونے کے دوران ہر اسٹیج p − 1 = {p1} "
            "مائیکرو بیچ کے برابر وقفے انتظار کرتا ہے اور m = {m} وقفے کام کرتا ہے: ببل "
            "(p − 1) / (m + p − 1) = {p1} / {mp1} = {value} ہے (Narayanan et al. 2021)۔ "
            "{gpu} پر یہ {busy_time} کام کے مقابلے میں {bubble_time} کا خالی وقت ہے۔ m = {m2} "
            "مائیکرو بیچز کے ساتھ یہ گھٹ کر {more} رہ جاتا ہے: فی اسٹیپ زیادہ مائیکرو بیچز، یا "
            "انٹرلیوڈ اسٹیجز، ببل کو چھوٹا کرتے ہیں۔",
        ),
    },
    "cp-per-rank": {
        Lang.en: Template(
            prompt="You train {ctx} with context parallelism over cp = {cp} GPUs (each takes "
            "{local} of a sequence's {seq} tokens). Without recompute, what does one GPU "
            "hold?",
            explanation="Context parallelism splits the sequence: each GPU runs every layer "
            "on its {local} tokens, so it keeps their activations, {acts_c} instead of "
            "{acts_b}. Attention still needs every token's keys and values; ring attention "
            "passes them from GPU to GPU a block at a time. The model is not split: each GPU "
            "keeps all the weights, gradients and optimizer states, {states_c} (shard them "
            "with ZeRO/FSDP over the same GPUs).",
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو cp = {cp} GPUs پر کانٹیکسٹ پیرالل ازم کے ساتھ ٹرین کرتے ہیں "
            "(ہر GPU ایک سیکوئنس کے {seq} ٹوکنز میں سے {local} لیتا ہے)۔ ری کمپیوٹ کے بغیر، "
            "ایک GPU کیا رکھتا ہے؟",
            explanation="کانٹیکسٹ پیرالل ازم سیکوئنس کو بانٹتا ہے: ہر GPU ہر لیئر اپنے {local} "
            "ٹوکنز پر چلاتا ہے، اس لیے انہی کی ایکٹیویشنز رکھتا ہے، {acts_b} کی جگہ {acts_c}۔ "
            "اٹینشن کو اب بھی ہر ٹوکن کی keys اور values چاہییں؛ رِنگ اٹینشن انہیں ایک ایک "
            "بلاک کر کے ایک GPU سے دوسرے تک پہنچاتی ہے۔ ماڈل نہیں بٹتا: ہر GPU تمام ویٹس، "
            "گریڈینٹس اور آپٹیمائزر اسٹیٹس رکھتا ہے، {states_c} (انہیں انہی GPUs پر ZeRO/FSDP "
            "سے شارڈ کیجیے)۔",
        ),
    },
    "fsdp-gathered-weights": {
        Lang.en: Template(
            prompt="You train {ctx} with ZeRO-3 / FSDP over {gpus} GPUs: each GPU keeps 1/{gpus} "
            "of every weight ({shard}); one block's weights are {block}, the embedding, final "
            "norm and LM head {root}. How much memory do the weights take on one GPU at the "
            "step's peak ({where})?",
            explanation="FSDP all-gathers a block's full weights just before the block runs and "
            "frees them after it (reshard_after_forward). At this moment the GPU holds its shard "
            "of everything, the root group's full weights (the embedding, final norm and LM "
            "head, which FSDP2 keeps gathered from the forward to the end of backward) and "
            "{blocks_sentence}: {sum}. Without sharding the weights alone would be {full}. The "
            "gradients go the other way: each block's full gradients are reduce-scattered after "
            "its backward, and FSDP2 keeps the last reduce-scatter's input until the next one"
            "{grads_sentence}.",
            parts={
                "grads": ", so at this moment the gradients take {peak_grads} against a final "
                "shard of {grads_shard}",
                "no_grads": "; at this moment backward has written no gradient yet (their "
                "final shard is {grads_shard})",
                "two": "the running block's full weights plus the next block's, prefetched",
                "one": "one block's full weights (the running block's, or the last block's, kept "
                "from the forward for the loss)",
            },
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو {gpus} GPUs پر ZeRO-3 / FSDP کے ساتھ ٹرین کرتے ہیں: ہر GPU ہر "
            "ویٹ کا 1/{gpus} حصہ رکھتا ہے ({shard})؛ ایک بلاک کے ویٹس {block} ہیں، اور ایمبیڈنگ، "
            "آخری نارم اور LM ہیڈ {root}۔ اسٹیپ کی پیک پر ({where}) ایک GPU پر ویٹس کتنی میموری "
            "لیتے ہیں؟",
            explanation="FSDP کسی بلاک کے چلنے سے عین پہلے اس کے پورے ویٹس all-gather کرتا ہے "
            "اور بعد میں انہیں خالی کر دیتا ہے (reshard_after_forward)۔ اس لمحے GPU کے پاس ہر "
            "چیز کا اپنا شارڈ ہے، روٹ گروپ کے پورے ویٹس (ایمبیڈنگ، آخری نارم اور LM ہیڈ، جنہیں "
            "FSDP2 فارورڈ سے بیک ورڈ کے آخر تک جمع رکھتا ہے) اور {blocks_sentence}: {sum}۔ "
            "شارڈنگ کے بغیر صرف ویٹس {full} ہوتے۔ گریڈینٹس الٹی سمت چلتے ہیں: ہر بلاک کے پورے "
            "گریڈینٹس اس کے بیک ورڈ کے بعد reduce-scatter ہوتے ہیں، اور FSDP2 پچھلے "
            "reduce-scatter کا ان پٹ اگلے تک رکھتا ہے{grads_sentence}۔",
            parts={
                "grads": "، اس لیے اس لمحے گریڈینٹس {peak_grads} لیتے ہیں، جبکہ آخر میں ان کا "
                "شارڈ {grads_shard} ہے",
                "no_grads": "؛ اس لمحے تک بیک ورڈ نے کوئی گریڈینٹ نہیں لکھا (ان کا آخری شارڈ "
                "{grads_shard} ہے)",
                "two": "چلتے بلاک کے پورے ویٹس اور اگلے بلاک کے بھی، جو پہلے سے منگوا لیے جاتے "
                "ہیں (prefetch)",
                "one": "ایک بلاک کے پورے ویٹس (چلتے بلاک کے، یا آخری بلاک کے جو لاس کے لیے "
                "فارورڈ سے رکھے رہتے ہیں)",
            },
        ),
    },
    "interleaved-pipeline": {
        Lang.en: Template(
            prompt="You train {ctx} on a pipeline of p = {p} GPUs with m = {m} micro-batches per "
            "step. On plain 1F1B the first GPU holds {before} of activations at its first "
            "backward. With the interleaved schedule, v = {v} virtual stages per GPU (each GPU "
            "holds {v} smaller chunks of layers), how much does it hold?",
            explanation="Interleaving makes the first GPU run more forwards before its first "
            "backward: Megatron counts p × (1 + (p − 1)/(p v)) = {p} × (1 + {p1}/{pv}) "
            "micro-batches' worth of its layers, {held} when rounded up, against {plain_held} "
            "on plain 1F1B: {before} → {value} (Narayanan et al. 2021). What it buys: the "
            "bubble's time shrinks by v, from {bubble_plain} to {bubble_inter} of the step, at "
            "the price of v times as many point-to-point transfers.",
        ),
        Lang.ur: Template(
            prompt="آپ {ctx} کو p = {p} GPUs کی پائپ لائن پر ہر اسٹیپ میں m = {m} مائیکرو بیچز "
            "کے ساتھ ٹرین کرتے ہیں۔ سادہ 1F1B پر پہلا GPU اپنے پہلے بیک ورڈ کے وقت {before} "
            "ایکٹیویشنز رکھتا ہے۔ انٹرلیوڈ شیڈول میں، ہر GPU پر v = {v} ورچوئل اسٹیجز (ہر GPU "
            "لیئرز کے {v} چھوٹے ٹکڑے رکھتا ہے)، یہ کتنی رکھتا ہے؟",
            explanation="انٹرلیونگ پہلے GPU سے پہلے بیک ورڈ سے قبل زیادہ فارورڈ چلواتی ہے: "
            "Megatron کی گنتی p × (1 + (p − 1)/(p v)) = {p} × (1 + {p1}/{pv}) مائیکرو بیچز کے "
            "برابر اس کی لیئرز ہے، اوپر راؤنڈ کر کے {held}، جبکہ سادہ 1F1B پر {plain_held}: "
            "{before} → {value} (Narayanan et al. 2021)۔ اس کا فائدہ: ببل کا وقت v گنا کم ہو جاتا "
            "ہے، اسٹیپ کے {bubble_plain} سے {bubble_inter}، اس قیمت پر کہ پوائنٹ ٹو پوائنٹ "
            "ٹرانسفرز v گنا ہو جاتے ہیں۔",
        ),
    },
}
"""Prompt and explanation of each question on several GPUs, by kind and language."""

LABELS: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "cp_pair": "activations {acts}, model states {states}",
        "fsdp.shard": "shard",
        "fsdp.root": "root group",
        "fsdp.blocks": "blocks",
    },
    Lang.ur: {
        "cp_pair": "ایکٹیویشنز {acts}، ماڈل اسٹیٹس {states}",
        "fsdp.shard": "شارڈ",
        "fsdp.root": "روٹ گروپ",
        "fsdp.blocks": "بلاکس",
    },
}
"""Option labels of the questions on several GPUs."""

MISTAKES: dict[Lang, dict[str, str]] = {
    Lang.en: {
        "tp.with_sp": "That is with sequence parallelism, which also splits the norms' "
        "inputs, dropout masks and residual stream along the sequence; without it they stay "
        "whole on every GPU.",
        "tp.all_divided": "That divides everything by t = {t}; without sequence parallelism "
        "the norms' inputs, dropout masks and residual stream are whole on every GPU.",
        "tp.not_divided": "That is the one-GPU figure; the tensors inside attention and the "
        "MLP divide by t = {t}.",
        "zero.stage1": "That is ZeRO-1: only the optimizer states are sharded; ZeRO-2 shards "
        "the gradients too.",
        "zero.stage3": "That is ZeRO-3, which shards the weights too; ZeRO-2 keeps a whole "
        "copy of them on every GPU.",
        "zero.none": "That is plain data parallelism: every GPU keeps everything.",
        "pp.one_micro": "That is one micro-batch of the first stage's layers; 1F1B runs p = "
        "{p} forwards there before the first backward.",
        "pp.all_micro": "That holds all m = {m} micro-batches, as GPipe (all forwards, then "
        "all backwards) does; 1F1B caps the first stage at p = {p}.",
        "pp.split_layers": "That splits one micro-batch's activations over the p stages; "
        "the first stage holds p = {p} micro-batches at once.",
        "pp.off_by_one": "Off by one: the first stage runs p = {p} forwards before its first "
        "backward, not p − 1.",
        "pp.bubble_over_compute": "That is the bubble against the busy time alone, (p − 1) "
        "/ m; as a share of the whole step it is (p − 1) / (m + p − 1).",
        "pp.swapped": "That swaps the roles: the idle slots are p − 1 = {p1}, the busy ones "
        "m = {m}.",
        "pp.single_micro": "That is the bubble of a single micro-batch, (p − 1) / p; m = {m} "
        "micro-batches keep the stages busy in turn.",
        "pp.no_bubble": "A pipeline has to fill and drain: the first stage's first backward "
        "waits until the forward has reached the last stage.",
        "pp.one_stage": "That is one stage's share of the layers, 1/p, not its idle time.",
        "cp.states_split": "That divides the model states by cp too; context parallelism "
        "splits only the sequence, and every GPU keeps the whole model.",
        "cp.acts_whole": "That keeps the whole sequence's activations; each GPU keeps only "
        "those of its {local} tokens.",
        "cp.backwards": "That has it backwards: cp splits the activations (the sequence), "
        "not the model states.",
        "fsdp.shard_only": "That is the shard alone; at that moment FSDP has also all-gathered "
        "full weights: the root group's ({root}) and those of the blocks that run.",
        "fsdp.one_block": "That adds one block's full weights but forgets the root group's "
        "({root}), which FSDP2 keeps gathered from the forward to the end of backward, and any "
        "prefetched block.",
        "fsdp.unsharded": "That is every weight unsharded, as without ZeRO-3; each GPU keeps "
        "only 1/{gpus} between uses.",
        "ilv.same": "That is plain 1F1B's figure; interleaving makes the first GPU start more "
        "micro-batches before its first backward ({held} instead of {plain_held}).",
        "ilv.divided": "That divides by v because each chunk is 1/v of the GPU's layers; but "
        "the GPU holds more micro-batches of all its chunks, not fewer.",
        "ilv.times_v": "That multiplies by v, as if each virtual stage held p micro-batches; "
        "Megatron's penalty is 1 + (p − 1)/(p v), not v.",
    },
    Lang.ur: {
        "tp.with_sp": "یہ سیکوئنس پیرالل ازم کے ساتھ کا عدد ہے، جو نارمز کے ان پٹ، ڈراپ آؤٹ "
        "ماسک اور ریزیجوئل اسٹریم کو بھی سیکوئنس کے ساتھ بانٹتا ہے؛ اس کے بغیر یہ ہر GPU پر "
        "پورے رہتے ہیں۔",
        "tp.all_divided": "یہ ہر چیز کو t = {t} سے تقسیم کرتا ہے؛ سیکوئنس پیرالل ازم کے بغیر "
        "نارمز کے ان پٹ، ڈراپ آؤٹ ماسک اور ریزیجوئل اسٹریم ہر GPU پر پورے ہوتے ہیں۔",
        "tp.not_divided": "یہ ایک GPU والا عدد ہے؛ اٹینشن اور MLP کے اندر کے ٹینسرز t = {t} "
        "سے تقسیم ہوتے ہیں۔",
        "zero.stage1": "یہ ZeRO-1 ہے: صرف آپٹیمائزر اسٹیٹس شارڈ ہوتی ہیں؛ ZeRO-2 گریڈینٹس "
        "کو بھی شارڈ کرتا ہے۔",
        "zero.stage3": "یہ ZeRO-3 ہے، جو ویٹس کو بھی شارڈ کرتا ہے؛ ZeRO-2 ہر GPU پر ان کی "
        "پوری کاپی رکھتا ہے۔",
        "zero.none": "یہ سادہ ڈیٹا پیرالل ازم ہے: ہر GPU سب کچھ رکھتا ہے۔",
        "pp.one_micro": "یہ پہلے اسٹیج کی لیئرز کا ایک مائیکرو بیچ ہے؛ 1F1B وہاں پہلے بیک "
        "ورڈ سے پہلے p = {p} فارورڈ چلاتا ہے۔",
        "pp.all_micro": "یہ تمام m = {m} مائیکرو بیچز رکھتا ہے، جیسے GPipe (پہلے سب فارورڈ، "
        "پھر سب بیک ورڈ) کرتا ہے؛ 1F1B پہلے اسٹیج پر یہ تعداد p = {p} تک محدود رکھتا ہے۔",
        "pp.split_layers": "یہ ایک مائیکرو بیچ کی ایکٹیویشنز کو p اسٹیجز میں بانٹتا ہے؛ پہلا "
        "اسٹیج ایک ساتھ p = {p} مائیکرو بیچز رکھتا ہے۔",
        "pp.off_by_one": "ایک کا فرق: پہلا اسٹیج اپنے پہلے بیک ورڈ سے پہلے p = {p} فارورڈ "
        "چلاتا ہے، p − 1 نہیں۔",
        "pp.bubble_over_compute": "یہ ببل کا موازنہ صرف کام کے وقت سے ہے، (p − 1) / m؛ پورے "
        "اسٹیپ کے حصے کے طور پر یہ (p − 1) / (m + p − 1) ہے۔",
        "pp.swapped": "اس میں کردار الٹ گئے: خالی وقفے p − 1 = {p1} ہیں، کام والے m = {m}۔",
        "pp.single_micro": "یہ ایک مائیکرو بیچ والا ببل ہے، (p − 1) / p؛ m = {m} مائیکرو "
        "بیچز اسٹیجز کو باری باری مصروف رکھتے ہیں۔",
        "pp.no_bubble": "پائپ لائن کو بھرنا اور خالی ہونا پڑتا ہے: پہلے اسٹیج کا پہلا بیک "
        "ورڈ تب تک رکتا ہے جب تک فارورڈ آخری اسٹیج تک نہ پہنچ جائے۔",
        "pp.one_stage": "یہ لیئرز میں ایک اسٹیج کا حصہ ہے، 1/p، اس کا خالی وقت نہیں۔",
        "cp.states_split": "یہ ماڈل اسٹیٹس کو بھی cp سے تقسیم کرتا ہے؛ کانٹیکسٹ پیرالل ازم "
        "صرف سیکوئنس بانٹتا ہے اور ہر GPU پورا ماڈل رکھتا ہے۔",
        "cp.acts_whole": "یہ پوری سیکوئنس کی ایکٹیویشنز رکھتا ہے؛ ہر GPU صرف اپنے {local} "
        "ٹوکنز کی رکھتا ہے۔",
        "cp.backwards": "یہ الٹ ہے: cp ایکٹیویشنز (سیکوئنس) کو بانٹتا ہے، ماڈل اسٹیٹس کو نہیں۔",
        "fsdp.shard_only": "یہ صرف شارڈ ہے؛ اس لمحے FSDP پورے ویٹس بھی all-gather کر چکا ہوتا "
        "ہے: روٹ گروپ کے ({root}) اور ان بلاکس کے جو چل رہے ہیں۔",
        "fsdp.one_block": "یہ ایک بلاک کے پورے ویٹس جوڑتا ہے مگر روٹ گروپ کے ویٹس ({root}) بھول "
        "جاتا ہے، جنہیں FSDP2 فارورڈ سے بیک ورڈ کے آخر تک جمع رکھتا ہے، اور پہلے سے منگوایا "
        "گیا بلاک بھی۔",
        "fsdp.unsharded": "یہ تمام ویٹس بغیر شارڈنگ کے ہیں، جیسے ZeRO-3 کے بغیر؛ ہر GPU "
        "استعمال کے درمیان صرف 1/{gpus} حصہ رکھتا ہے۔",
        "ilv.same": "یہ سادہ 1F1B والا عدد ہے؛ انٹرلیونگ میں پہلا GPU اپنے پہلے بیک ورڈ سے "
        "پہلے زیادہ مائیکرو بیچز شروع کرتا ہے ({plain_held} کی جگہ {held})۔",
        "ilv.divided": "یہ v سے تقسیم کرتا ہے کیونکہ ہر ٹکڑا GPU کی لیئرز کا 1/v ہے؛ مگر GPU "
        "اپنے تمام ٹکڑوں کے زیادہ مائیکرو بیچز رکھتا ہے، کم نہیں۔",
        "ilv.times_v": "یہ v سے ضرب دیتا ہے، جیسے ہر ورچوئل اسٹیج p مائیکرو بیچز رکھتا ہو؛ "
        "Megatron کا اضافہ 1 + (p − 1)/(p v) ہے، v نہیں۔",
    },
}
"""What each distractor of the questions on several GPUs stands for."""
