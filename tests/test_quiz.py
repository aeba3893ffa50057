"""``memcalc quiz``: the bank files, the questions generated from a model (checked against
``estimate``), the interactive loop, scripted and study-sheet modes, both languages, errors."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from memcalc.errors import MemcalcError
from memcalc.estimate import DEFAULT_MFU, Options, estimate
from memcalc.params import count_params
from memcalc.plan.strategies import complexity
from memcalc.profiles import load_profile
from memcalc.quiz import command as quiz_module
from memcalc.quiz.bank import (
    LETTERS,
    NUM_OPTIONS,
    Difficulty,
    Lang,
    Topic,
    bank_dir,
    bank_files,
    load_bank,
    load_bank_data,
    load_bank_file,
)
from memcalc.quiz.generate import KINDS, model_questions, strategy_label
from memcalc.quiz.session import parse_answer
from memcalc.quiz.templates import LABELS
from memcalc.report.estimate import describe, glance
from memcalc.spec.presets import preset
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute, sqrt_k
from memcalc.strategies.selection import default_strategies
from memcalc.units import Unit
from quiz_helpers import ROOT, cli, isolated_state, quiz, reveal, shows

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOC = ROOT / "README.md"
pytestmark = pytest.mark.usefixtures(isolated_state.__name__)

SEED_CONCEPTS = (
    "recompute-trades-compute-for-memory",
    "activations-stored-for-backward",
    "measure-checkpoint-overhead",
    "sqrt-n-checkpointing",
    "selective-recompute",
    "offload-complements-recompute",
    "dropout-rng-replay",
    "recompute-keeps-optimizer-state",
)
"""The eight concepts of the original seed quiz (shared/seeds/000_*.txt)."""


def _wrong(letter: str) -> str:
    return next(x for x in LETTERS if x != letter)


# --- the bank --------------------------------------------------------------------------------


def test_every_bank_file_validates():
    files = bank_files()
    assert files, f"no bank files in {bank_dir()}"
    for path in files:
        assert load_bank_file(path), path


@pytest.mark.parametrize("path", bank_files(), ids=lambda p: p.name)
def test_bank_file_schema(path):
    """Checked on the raw TOML too, so the test does not rely on the loader alone."""
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    assert set(raw) <= {"questions", "concepts"}
    for slug, name in raw.get("concepts", {}).items():
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", slug) and set(name) == {"en", "ur"}, slug
        assert re.search("[\u0600-\u06ff]", name["ur"]), slug
    for q in raw["questions"]:
        required = {"id", "concept", "topic", "difficulty", "correct", "en", "ur"}
        assert required <= set(q) <= required | {"numeric"}, q["id"]
        assert q["topic"] in {t.value for t in Topic}, q["id"]
        assert q["difficulty"] in {d.value for d in Difficulty}, q["id"]
        assert 0 <= q["correct"] < NUM_OPTIONS, q["id"]
        for lang in ("en", "ur"):
            text = q[lang]
            assert {"prompt", "options", "explanation"} <= set(text), (q["id"], lang)
            assert set(text) <= {"prompt", "options", "explanation", "feedback"}, (q["id"], lang)
            assert text["prompt"].strip() and text["explanation"].strip(), (q["id"], lang)
            options = [o.strip() for o in text["options"]]
            assert len(options) == NUM_OPTIONS, (q["id"], lang)
            # Exactly one correct option: the options are distinct and ``correct`` picks one.
            assert len(set(options)) == NUM_OPTIONS and all(options), (q["id"], lang)


def test_bank_ids_unique_and_seed_concepts_covered_in_both_languages():
    questions = load_bank()
    ids = [q.id for q in questions]
    assert len(ids) == len(set(ids))
    assert not any(i.startswith("model-") for i in ids)
    for concept in SEED_CONCEPTS:
        covering = [q for q in questions if q.concept == concept]
        assert covering, f"seed concept {concept} has no question"
        for q in covering:
            assert q.en.prompt.strip() and q.ur.prompt.strip()
            assert q.en.explanation.strip() and q.ur.explanation.strip()
            # Urdu text is really Urdu (Arabic script), not a copy of the English.
            assert re.search("[\u0600-\u06ff]", q.ur.prompt), q.id


def test_every_concept_has_a_name_in_both_languages():
    bank = load_bank_data()
    concepts = {q.concept for q in bank.questions} | {k.concept for k in KINDS.values()}
    for concept in concepts:
        name = bank.concepts[concept]
        assert name.en.strip() and re.search("[\u0600-\u06ff]", name.ur), concept


VALID = """
[[questions]]
id = "t-one"
concept = "c-one"
topic = "recompute"
difficulty = "easy"
correct = 1
[questions.en]
prompt = "p"
options = ["a", "b", "c", "d"]
explanation = "e"
[questions.ur]
prompt = "پ"
options = ["ا", "ب", "ج", "د"]
explanation = "و"
"""


@pytest.mark.parametrize(
    "bad, field",
    [
        (
            VALID.replace('topic = "recompute"', 'topic = "memory"'),
            "questions[0] (id 't-one').topic",
        ),
        (VALID.replace("correct = 1", "correct = 4"), "questions[0] (id 't-one').correct"),
        (VALID.replace('"c", "d"]', '"c"]'), "questions[0] (id 't-one').en.options"),
        (VALID.replace('"c", "d"]', '"c", "a"]'), "questions[0] (id 't-one').en.options"),
        (
            VALID.replace('explanation = "e"', 'explanation = "  "'),
            "questions[0] (id 't-one').en.explanation",
        ),
        (VALID.replace("correct = 1", 'correct = 1\nhint = "x"'), "questions[0] (id 't-one').hint"),
        (VALID.split("[questions.ur]")[0], "questions[0] (id 't-one').ur"),
    ],
)
def test_bad_bank_file_is_one_line_naming_file_and_field(tmp_path, bad, field):
    path = tmp_path / "broken.toml"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(MemcalcError) as e:
        load_bank(tmp_path)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert field in message


def test_duplicate_ids_across_files_and_malformed_toml(tmp_path):
    (tmp_path / "a.toml").write_text(VALID, encoding="utf-8")
    (tmp_path / "b.toml").write_text(VALID, encoding="utf-8")
    with pytest.raises(MemcalcError, match=r"b\.toml: questions\[0\]\.id: duplicate id 't-one'"):
        load_bank(tmp_path)
    (tmp_path / "b.toml").write_text("[[questions]\n", encoding="utf-8")
    with pytest.raises(MemcalcError, match=r"b\.toml: malformed TOML"):
        load_bank(tmp_path)


def test_bad_bank_file_through_the_command(tmp_path, monkeypatch):
    (tmp_path / "broken.toml").write_text(
        VALID.replace("correct = 1", "correct = -1"), encoding="utf-8"
    )
    monkeypatch.setattr(quiz_module, "load_bank_data", lambda: load_bank_data(tmp_path))
    result = quiz("--reveal")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "broken.toml: questions[0] (id 't-one').correct" in result.stderr


# --- questions generated from the model: every answer equals the estimate ---------------------

CASES = [
    ("gpt2", "h100-sxm-80gb", TrainingSetup()),
    ("gpt2", "t4-16gb", TrainingSetup(precision="fp32", batch=4)),
    ("llama-2-7b", "a100-sxm-80gb", TrainingSetup()),
    ("llama-2-7b", "h100-sxm-80gb", TrainingSetup(batch=8, seq=4096)),
    ("tinyllama-1.1b", "rtx-4090-24gb", TrainingSetup(batch=4, seq=2048)),
    ("llama-2-70b", "a100-sxm-80gb", TrainingSetup()),
    ("qwen2.5-0.5b", "l4-24gb", TrainingSetup(precision="bf16", batch=2)),
]


@pytest.mark.parametrize("model, gpu, setup", CASES, ids=[f"{m}-{g}" for m, g, _ in CASES])
def test_generated_answers_equal_the_estimate(model, gpu, setup):
    spec, profile = preset(model), load_profile(gpu)
    questions = {q.id.removeprefix("model-"): q for q in model_questions(spec, setup, profile)}
    # Every kind is asked, except one whose options would not keep their margin (and the
    # mixture-of-experts kinds for a dense model).
    assert set(questions) <= set(KINDS)
    moe_kinds = {name for name, kind in KINDS.items() if kind.topic is Topic.moe}
    # asked only where the variant exists: fp8 on a GPU with fp8 tensor cores, FSDP's
    # gathered weights at a peak outside the optimizer step, an interleaved pipeline on a model
    # deep enough, ZeRO-Offload on a node of several GPUs
    conditional = {
        "fp8-activations",
        "fsdp-gathered-weights",
        "interleaved-pipeline",
        "offload-pinned-host",
    }
    assert (
        set(KINDS) - set(questions)
        <= {"dominant-component", "optimizer-states"} | moe_kinds | conditional
    )
    answer = {kind: q.en.options[q.correct] for kind, q in questions.items()}

    # Independently: one estimate per strategy, straight from the engine.
    base = estimate(spec, setup, profile, Options())
    full = estimate(spec, setup, profile, Options(recompute=Recompute.full))
    n = spec.num_layers
    sqrt = estimate(spec, setup, profile, Options(recompute=Recompute.every_k, every=sqrt_k(n)))
    p = count_params(spec).total

    assert shows(answer["weights"], p * setup.weight_dtype.itemsize)
    assert shows(answer["weights"], base.parameter_bytes)
    if "optimizer-states" in answer:
        assert shows(answer["optimizer-states"], base.optimizer_bytes)
    else:  # left out only when the optimizer holds nothing
        assert base.optimizer_bytes == 0
    detail = base.optimizer_detail
    per_param = (
        base.parameter_bytes + base.gradient_bytes + detail.state_bytes + detail.master_weight_bytes
    ) / p
    assert answer["bytes-per-param"] == f"{per_param:g} bytes"
    if setup.precision.value == "bf16-mixed":
        assert per_param == 18  # Megatron's 2 + 4 + 12
    sizes = {
        "parameters": base.parameter_bytes,
        "gradients": base.gradient_bytes,
        "optimizer": base.optimizer_bytes,
        "activations": base.activation_bytes,
    }
    if "dominant-component" in answer:
        assert answer["dominant-component"] == LABELS[Lang.en][max(sizes, key=sizes.__getitem__)]
    assert shows(answer["activations"], base.activation_bytes)
    assert shows(answer["full-recompute-saves"], base.activation_bytes - full.activation_bytes)
    extra = full.extra_forward_flops / (3 * full.forward_flops)
    assert answer["full-recompute-flops"] == f"+{100 * extra:.1f}%"
    assert answer["sqrt-checkpoints"] == str(math.ceil(n / sqrt_k(n)))
    assert answer["sqrt-checkpoints"] == str(sqrt.activation_plan.checkpoints)
    every4 = estimate(spec, setup, profile, Options(recompute=Recompute.every_k, every=4))
    assert shows(answer["every-k-peak"], every4.activation_plan.peak_activation_bytes)
    ks = {1, 2, 4, sqrt_k(n), 2 * sqrt_k(n), n // 2, n}
    worst = {
        k: estimate(
            spec, setup, profile, Options(recompute=Recompute.every_k, every=k)
        ).activation_plan.peak_activation_bytes
        for k in ks
    }
    assert answer["every-k-best"] == f"k = {min(ks, key=lambda k: (worst[k], k))}"
    size_text, _, verdict = answer["fits"].partition(": ")
    assert shows(size_text, base.peak_bytes)
    # the estimate's own verdict: the caching allocator finishes the step within the usable
    # memory, or (where the replay does not model the layout) the peak is within it
    assert verdict == ("fits" if base.fits else "does not fit")
    if base.reserved.modelled:
        assert base.fits == (not base.reserved.out_of_memory)
    else:
        assert base.fits == (base.peak_bytes <= profile.memory_bytes - base.reserve_bytes)

    # Cheapest way to fit: the least added time among the rows memcalc estimate compares,
    # the strategy its verdict line names
    rows = []
    for opts in default_strategies(n, setup):
        try:
            # at the quiz's one utilisation (its --mfu default)
            rows.append(estimate(spec, setup, profile, replace(opts, mfu=DEFAULT_MFU)))
        except MemcalcError:  # a row the profile cannot run (optimizer=nvme without NVMe)
            continue
    fitting = [b for b in rows if b.fits]
    best = min(
        fitting,
        key=lambda b: (b.time.added_seconds, complexity(b.options), b.peak_bytes),
        default=None,
    )
    expected = (
        LABELS[Lang.en]["none_fits"] if best is None else strategy_label(best.options, Lang.en)
    )
    assert answer["cheapest-fit"] == expected
    verdict_line = glance(rows, Unit.GiB)
    if best is None:
        assert verdict_line.startswith("Nothing fits")
    else:
        assert describe(best) in verdict_line
    if base.fits:
        assert expected == LABELS[Lang.en]["nothing_needed"]

    for kind, q in questions.items():
        # Both languages, same options in the same order for numbers; explanations show the
        # learner's numbers; the correct answer is also in the Urdu explanation when numeric.
        assert len(q.ur.options) == NUM_OPTIONS and q.ur.explanation.strip()
        assert re.search("[\u0600-\u06ff]", q.ur.prompt), kind
        assert spec.name in q.en.prompt or spec.name in q.en.explanation, kind
        if kind in (
            "weights",
            "optimizer-states",
            "activations",
            "full-recompute-saves",
            "full-recompute-flops",
            "sqrt-checkpoints",
            "every-k-peak",
        ):
            assert q.ur.options[q.correct] == answer[kind]
            assert answer[kind] in q.en.explanation and answer[kind] in q.ur.explanation, kind


def test_generated_questions_cover_the_issue_list():
    kinds = set(KINDS)
    assert {
        "optimizer-states",
        "dominant-component",
        "full-recompute-saves",
        "full-recompute-flops",
        "sqrt-checkpoints",
        "fits",
        "cheapest-fit",
        "every-k-peak",
        "every-k-best",
    } <= kinds
    # Every generated concept or topic is a valid tag / Topic.
    for kind in KINDS.values():
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", kind.concept)


def test_distractors_are_the_named_mistakes():
    """Llama-2-7B, bf16-mixed AdamW: the wrong options are the classic mistakes, and each
    one says which mistake it is."""
    spec, setup, gpu = preset("llama-2-7b"), TrainingSetup(), load_profile("a100-sxm-80gb")
    qs = {q.id: q for q in model_questions(spec, setup, gpu)}
    base = estimate(spec, setup, gpu)

    def option(qid, num_bytes):
        q = qs[qid]
        hits = [i for i, o in enumerate(q.en.options) if shows(o.split(":")[0], num_bytes)]
        assert hits, (qid, num_bytes, q.en.options)
        return q.en.feedback[hits[0]]

    no_master = base.optimizer_bytes - base.optimizer_detail.master_weight_bytes
    assert "master copy" in option("model-optimizer-states", no_master)
    assert "decimal GB" in option("model-optimizer-states", base.optimizer_bytes * 2**30 / 10**9)
    bpp = qs["model-bytes-per-param"].en
    assert "ZeRO paper" in bpp.feedback[bpp.options.index("16 bytes")]
    assert "master weights" in bpp.feedback[bpp.options.index("14 bytes")]
    full = estimate(spec, setup, gpu, Options(recompute=Recompute.full))
    assert "as zero" in option("model-full-recompute-saves", base.activation_bytes)
    assert "one block" in option("model-activations", base.activation_plan.layer_stored(0))
    assert "full recompute keeps" in option("model-activations", full.activation_bytes)
    for q in qs.values():
        assert q.en.feedback[q.correct] == "" and q.ur.feedback[q.correct] == ""
        for i in range(NUM_OPTIONS):
            if i != q.correct:
                assert q.en.feedback[i].strip() and q.ur.feedback[i].strip(), (q.id, i)


# --- selection and shuffling -----------------------------------------------------------------


def test_same_seed_same_quiz_and_options_are_shuffled():
    a = reveal("--seed", "11", "--count", "12")
    assert a == reveal("--seed", "11", "--count", "12")
    assert a["questions"] != reveal("--seed", "12", "--count", "12")["questions"]
    # Generated questions are built with the correct option first; shuffling moves it.
    positions = {q["correct"] for q in reveal("--seed", "3", "--source", "model")["questions"]}
    assert len(positions) > 1


def test_default_mixes_bank_and_model_half_and_half():
    data = reveal("--seed", "5")
    sources = [q["source"] for q in data["questions"]]
    assert len(sources) == 10 and sources.count("bank") == 5 and sources.count("model") == 5
    assert all(q["id"].startswith("model-") == (q["source"] == "model") for q in data["questions"])


def test_filters_and_sources():
    data = reveal("--topic", "recompute", "--difficulty", "medium,hard", "--seed", "2")
    assert data["questions"]
    assert {q["topic"] for q in data["questions"]} == {"recompute"}
    assert {q["difficulty"] for q in data["questions"]} <= {"medium", "hard"}
    assert all(q["source"] == "bank" for q in reveal("--source", "bank")["questions"])
    model_only = reveal("--source", "model", "--count", "50")
    generated = model_questions(preset("gpt2"), TrainingSetup(), load_profile("h100-sxm-80gb"))
    assert len(model_only["questions"]) == len(generated)
    multi = reveal("--topic", "offload", "--topic", "precision", "--count", "50")
    assert {q["topic"] for q in multi["questions"]} == {"offload", "precision"}


def test_count_larger_than_the_pool_says_so():
    result = quiz("--source", "model", "--count", "50", "--reveal")
    assert result.exit_code == 0
    n = len(model_questions(preset("gpt2"), TrainingSetup(), load_profile("h100-sxm-80gb")))
    assert f"note: only {n} questions match" in result.stderr


# --- the interactive loop --------------------------------------------------------------------

QUIZ3 = ("--model", "llama-2-7b", "--gpu", "a100-sxm-80gb", "--count", "3", "--seed", "7")


def test_interactive_right_wrong_and_invalid_then_valid():
    questions = reveal(*QUIZ3)["questions"]
    c = [q["correct"] for q in questions]
    typed = f"{c[0]}\n{_wrong(c[1])}\nx\n7\n\n{LETTERS.index(c[2]) + 1}\n"
    result = quiz(*QUIZ3, input=typed)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("memcalc quiz: 3 questions. Your model: llama-2-7b")
    assert "Question 1/3" in out and "Question 3/4" in out  # the miss added a question
    assert out.count("Right! ") == 2
    correct_1 = f"{c[1]}) {questions[1]['options'][LETTERS.index(c[1])]}"
    assert f"The correct answer is {correct_1}" in out
    assert out.count("Please answer with a letter a-d or a number 1-4") == 3
    for q in questions:
        assert q["prompt"] in out and f"Why: {q['explanation']}" in out
    assert "Score: 2/3 (67%)" in out
    name = load_bank_data().concepts[questions[1]["concept"]].en
    assert f"Concepts to review: {name}" in out
    # The miss scheduled a sibling on the same concept, after the last question.
    assert "Question 4/4 · " in out and "again, on a concept you missed" in out
    assert "Quiz ended after 3 of 4 questions." in out


def test_eof_mid_quiz_ends_cleanly_with_the_score_so_far():
    questions = reveal(*QUIZ3)["questions"]
    result = quiz(*QUIZ3, input=f"{questions[0]['correct']}\n")
    assert result.exit_code == 0 and result.exception is None
    assert "Traceback" not in result.output
    assert "Question 2/3" in result.stdout and "Question 3/3" not in result.stdout
    assert "Quiz ended after 1 of 3 questions." in result.stdout
    assert "Score: 1/1 (100%)" in result.stdout
    assert "Nothing to review: every answer was right." in result.stdout


def test_eof_before_any_answer_and_q_to_quit():
    result = quiz(*QUIZ3, input="")
    assert result.exit_code == 0 and result.exception is None
    assert "Quiz ended after 0 of 3 questions." in result.stdout
    assert "No question answered." in result.stdout
    result = quiz(*QUIZ3, input="q\n")
    assert result.exit_code == 0 and "Quiz ended after 0 of 3 questions." in result.stdout


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch):
    def interrupted(_prompt):
        raise KeyboardInterrupt

    monkeypatch.setattr(quiz_module, "_terminal_reader", lambda _screen: interrupted)
    result = quiz(*QUIZ3)
    assert result.exit_code == 130
    assert result.stderr == "Quiz interrupted after 0 of 3 questions; score 0/0.\n"
    assert "Traceback" not in result.output


def test_parse_answer():
    assert [parse_answer(x) for x in ("a", "B", " c ", "d)", "1", "4.")] == [0, 1, 2, 3, 0, 3]
    assert [parse_answer(x) for x in ("", "e", "0", "5", "ab", "-1")] == [None] * 6
    # Urdu letters (alif, be, jim, dal), Urdu/Persian and Arabic-Indic digits, on purpose.
    assert [parse_answer(x) for x in ("ا", "ب", "ج", "د", "ج)", "د۔")] == [0, 1, 2, 3, 2, 3]
    assert [parse_answer(x) for x in ("۱", "۲", "۳", "۴", "١", "٤")] == [0, 1, 2, 3, 0, 3]
    # Other digits are not answers: Devanagari 1, Urdu 0 and 5, fullwidth 2.
    assert [parse_answer(x) for x in ("\u0967", "۰", "۵", "\uff12", "ه")] == [None] * 5


# --- scripted, study sheet, languages --------------------------------------------------------


def test_scripted_json_scores_the_answers():
    questions = reveal(*QUIZ3[:4], "--seed", "9", "--count", "4")["questions"]
    c = [q["correct"] for q in questions]
    given = [c[0], _wrong(c[1]), c[2], _wrong(c[3])]
    result = quiz(*QUIZ3[:4], "--seed", "9", "--answers", ",".join(given), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["score"] == {"correct": 2, "answered": 4, "total": 4}
    assert [q["answer"] for q in data["questions"]] == given
    assert [q["is_correct"] for q in data["questions"]] == [True, False, True, False]
    for q in data["questions"]:
        assert set(q) >= {
            "id",
            "concept",
            "prompt",
            "options",
            "answer",
            "correct",
            "is_correct",
            "mistake",
            "mistakes",
            "explanation",
        }
        if q["is_correct"]:
            assert q["mistake"] is None
        else:
            assert q["mistake"] == q["mistakes"].get(q["answer"])
    assert data["review"] == list(dict.fromkeys([questions[1]["concept"], questions[3]["concept"]]))


def test_scripted_text_shows_each_answer():
    questions = reveal("--seed", "4", "--count", "2")["questions"]
    answers = f"{questions[0]['correct']},{_wrong(questions[1]['correct'])}"
    result = quiz("--seed", "4", "--answers", answers)
    assert result.exit_code == 0
    assert f"Your answer (a-d, q to quit): {questions[0]['correct']}" in result.stdout
    assert "Right! " in result.stdout and "Wrong: you chose " in result.stdout
    assert "Score: 1/2 (50%)" in result.stdout


def test_reveal_study_sheet_text_and_json():
    result = quiz("--reveal", "--seed", "1", "--count", "6")
    assert result.exit_code == 0
    assert result.stdout.startswith("memcalc quiz study sheet: 6 questions with answers.")
    assert result.stdout.count("\nAnswer: ") == 6 and result.stdout.count("\nWhy: ") == 6
    assert "\nWhy not " in result.stdout  # each wrong option's mistake, on the sheet
    data = reveal("--seed", "1", "--count", "6")
    assert data["score"] is None
    assert all(q["answer"] is None and q["is_correct"] is None for q in data["questions"])
    for q in data["questions"]:
        assert (
            f"Answer: {q['correct']}) {q['options'][LETTERS.index(q['correct'])]}" in result.stdout
        )


def test_urdu_quiz():
    en, ur = reveal(*QUIZ3), reveal(*QUIZ3, lang="ur")
    assert [q["id"] for q in en["questions"]] == [q["id"] for q in ur["questions"]]
    assert [q["correct"] for q in en["questions"]] == [q["correct"] for q in ur["questions"]]
    bank = {q.id: q for q in load_bank()}
    for q in ur["questions"]:
        assert re.search("[\u0600-\u06ff]", q["prompt"]) and re.search(
            "[\u0600-\u06ff]", q["explanation"]
        )
        if q["id"] in bank:
            assert q["prompt"] == bank[q["id"]].ur.prompt
    first = "ابجد"[LETTERS.index(ur["questions"][0]["correct"])]  # answered with an Urdu letter
    result = quiz(*QUIZ3, "--lang", "ur", input=f"{first}\n")
    assert result.exit_code == 0
    assert "سوال \u20661/3\u2069" in result.stdout and "درست! " in result.stdout
    assert "اسکور: \u20661/1 (100%)\u2069" in result.stdout
    sheet = quiz(*QUIZ3, "--lang", "ur", "--reveal")
    assert sheet.exit_code == 0 and sheet.stdout.count("\n\u200fجواب: ") == 3


# --- bad input: one line, naming the flag and the allowed values, exit code 2 -----------------


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("--topic", "memory"),
            "--topic: unknown value 'memory'; choose one of: recompute, "
            "activations, parameters, optimizer, attention, offload, "
            "precision, sharding",
        ),
        (("--topic", "recompute,nope"), "--topic: unknown value 'nope'"),
        (
            ("--difficulty", "expert"),
            "--difficulty: unknown value 'expert'; choose one of: easy, medium, hard",
        ),
        (("--lang", "fr"), "--lang: unknown value 'fr'; choose one of: en, ur"),
        (
            ("--format", "xml"),
            "--format: unknown value 'xml'; choose one of: text, json, markdown, html, anki",
        ),
        (("--source", "web"), "--source: unknown value 'web'; choose one of: mixed, bank, model"),
        (("--precision", "int4"), "Invalid value for '--precision': 'int4' is not one of 'fp32'"),
        (("--optimizer", "adan"), "Invalid value for '--optimizer': 'adan' is not one of 'sgd'"),
        (("--attention", "ring"), "Invalid value for '--attention': 'ring' is not one of"),
        (("--answers", "b,e,a"), "--answers: answer 2 is 'e'; use one of: a, b, c, d (or 1-4)"),
        (("--answers", "b,,a"), "--answers: answer 2 is ''"),
        (("--answers", "a,b", "--count", "3"), "--answers: got 2 answers for 3 questions"),
        (("--answers", "a", "--reveal"), "--reveal: cannot be combined with --answers"),
        (("--format", "json"), "--format: json needs --answers or --reveal"),
        (("--count", "0"), "--count: must be a positive integer; got 0"),
        (("--batch", "0"), "--batch: must be a positive integer; got 0"),
        (("--model", "gtp2"), "--model: unknown value 'gtp2'; did you mean 'gpt2'?"),
        (("--gpu", "h1000"), "--gpu: unknown value 'h1000'; did you mean 'h100-sxm-80gb'?"),
        (
            ("--source", "model", "--topic", "attention", "--difficulty", "easy"),
            "--topic attention and --difficulty easy: no question matches",
        ),
        (("--mfu", "1.5"), "Invalid value for '--mfu': 1.5 is outside [0.001, 1]"),
        (("--format", "anki"), "--format: anki is a study-sheet format; use it with --reveal"),
        (("--typed", "--answers", "a"), "--typed: only for a quiz answered at the keyboard"),
        (("--typed", "--reveal"), "--typed: only for a quiz answered at the keyboard"),
        (("--stats", "--reveal"), "--stats: prints progress only"),
        (("--review", "--source", "bank"), "--source: does not apply with --review"),
        (("--grad-dtype", "fp16"), "--grad-dtype: must be one of: bf16, fp32"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, expected):
    """Through the real command line, as a learner types it."""
    code, out, err = cli(capsys, "quiz", *args)
    assert code == 2, err
    assert out == ""
    assert err.startswith(f"error: {expected}"), err
    assert err.count("\n") == 1
    assert "Traceback" not in err


# --- packaging rules and the README section --------------------------------------------------


def test_quiz_never_imports_torch():
    code = (
        "import sys, memcalc.quiz.command, memcalc.quiz.generate, memcalc.quiz.export, "
        "memcalc.quiz.progress; sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _doc_session() -> tuple[list[str], str]:
    """The example session in README.md: its command's arguments and its transcript."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- example-session -->\s*```text\n(.*?)```", text, re.S)
    assert block, "README.md: no ```text block after <!-- example-session -->"
    first, _, transcript = block.group(1).partition("\n")
    assert first.startswith("$ memcalc quiz ")
    return first.removeprefix("$ memcalc quiz ").split(), transcript


def test_doc_example_session_is_what_the_quiz_prints():
    """The transcript was run for real; replaying the typed answers must print it again."""
    args, transcript = _doc_session()
    typed = re.findall(r"^(?:Your answer \(a-d, q to quit\): )(.*)$", transcript, re.M)
    assert typed, "README.md example session has no typed answers"
    result = quiz(*args, input="".join(f"{t}\n" for t in typed))
    assert result.exit_code == 0
    assert result.stdout.rstrip("\n") == transcript.rstrip("\n"), (
        "README.md example session is stale: run `memcalc quiz "
        + " ".join(args)
        + "`, answer as in the doc, and paste the new transcript"
    )


def test_doc_commands_run():
    text = DOC.read_text(encoding="utf-8")
    commands = re.findall(r"^memcalc quiz((?:\s.*?)?)(?:\s+#.*)?$", text, re.M)
    assert len(commands) >= 5
    for rest in commands:
        args = rest.split()
        if "--reveal" not in args and "--answers" not in args:
            args += ["--count", "1"]  # interactive: answer one question, then end of input
        result = quiz(*args, input="a\n")
        assert result.exit_code == 0, (rest, result.output)


def test_without_seed_the_drawn_seed_is_printed_and_replays_the_quiz():
    first = quiz("--reveal", "--count", "4")
    assert first.exit_code == 0
    seed = re.search(r"Seed (\d+)\.", first.stdout).group(1)
    again = quiz("--reveal", "--count", "4", "--seed", seed)
    assert again.stdout == first.stdout
