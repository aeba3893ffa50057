"""Every file kind memcalc reads -- model spec TOML and JSON, HF config.json, GPU profile
TOML, quiz progress JSON -- with generated bad contents (issue 12): a field set to a value of
the wrong type or out of bounds, random bytes, deep nesting, huge numbers. Each run exits 0 or
2 with no traceback, an error is one ``error:`` line naming the file, and the file is left as
it was."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import typing
from pathlib import Path

import pytest
from fuzz_harness import PROFILES, check, profile
from hypothesis import given
from hypothesis import strategies as st

from memcalc.profiles import FIELDS as PROFILE_FIELDS
from memcalc.profiles import GpuProfile
from memcalc.spec.model import MlaSpec, ModelSpec, MoeSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent.parent / "data"
ROOT = Path(__file__).parent.parent.parent

ODD_VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    3,
    7,
    10**6 + 1,
    10**9,
    2**31,
    2**63 - 1,
    2**64,
    10**30,
    int("9" * 4000),
    0.5,
    1.5,
    -0.0,
    1e-320,
    5e-324,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "x",
    "1",
    "true",
    "48GB",
    "inf",
    "nan",
    [],
    [1],
    ["full"],
    {},
    {"a": 1},
    [[[[[[[[[[1]]]]]]]]]],
]
"""Values any field might get: wrong types, every edge of a number, nesting."""


def odd_value() -> st.SearchStrategy[object]:
    return st.one_of(
        st.sampled_from(ODD_VALUES),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.lists(st.integers(-5, 5) | st.text(max_size=5), max_size=4),
    )


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        items = (f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items() if x is not None)
        return "{" + ", ".join(items) + "}"
    raise TypeError(v)


def to_toml(doc: dict[str, object]) -> str:
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in doc.items() if v is not None)


def to_json(doc: object) -> str:
    return json.dumps(doc)  # NaN / Infinity as the literals Python's json reads


SPEC_BASE: dict[str, object] = dict(tomllib.loads((DATA / "tiny-llama.toml").read_text()))
MOE_BASE = {"num_experts": 4, "top_k": 2, "expert_size": 32}
MLA_BASE = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8}
SPEC_FIELDS = [f.name for f in dataclasses.fields(ModelSpec)]
MOE_FIELDS = [f.name for f in dataclasses.fields(MoeSpec)]
MLA_FIELDS = [f.name for f in dataclasses.fields(MlaSpec)]

HF_BASES = {
    name: json.loads(path.read_text())
    for name, path in {
        "llama": DATA / "llama-2-7b-config.json",
        "mixtral": DATA / "hf" / "mixtral-8x7b.json",
        "deepseek": DATA / "hf" / "deepseek-v2-lite.json",
        "gemma3": DATA / "hf" / "gemma-3-4b.json",
        "gpt2": DATA / "hf" / "tiny" / "gpt2.json",
    }.items()
    if path.exists()
}

PROFILE_BASE: dict[str, object] = dict(
    tomllib.loads((ROOT / "profiles" / "h100-sxm-80gb.toml").read_text())
)

PROGRESS_BASE = {
    "version": 1,
    "questions": {
        "attn-eager-keeps-scores": {
            "box": 1,
            "concept": "eager-attention-keeps-scores",
            "due": "2026-12-01T11:04:08.924078Z",
            "history": [{"answer": "a", "at": "2026-12-01T11:04:08.924078Z", "correct": False}],
            "topic": "attention",
        }
    },
}


HINTS = {
    "": typing.get_type_hints(ModelSpec),
    "moe": typing.get_type_hints(MoeSpec),
    "mla": typing.get_type_hints(MlaSpec),
    "profile": typing.get_type_hints(GpuProfile),
}
NUMBER_TYPES = (int, float, int | None, float | None)


def impossible(hint: object, value: object) -> bool:
    """A value no number field can take: a bool, a non-finite float, a float with a fraction
    for an int, an integer past any bound."""
    if hint not in NUMBER_TYPES:
        return False
    if isinstance(value, bool) or isinstance(value, (str, list, dict)):
        return True
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if hint in (int, int | None) and isinstance(value, float) and not value.is_integer():
        return True
    return isinstance(value, int) and abs(value) > 10**18


HF_NUMBERS = {
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
}
"""HF config keys memcalc reads as whole numbers."""


def _estimate(path: Path) -> list[str]:
    return ["estimate", "--model", str(path), "--format", "json"]


def _file_check(path: Path, argv: list[str], valid: bool | None = None) -> None:
    check(argv, names=[str(path), path.name], files=[path], valid=valid)


# --- one field of a valid file set to an odd value -----------------------------------------


@pytest.mark.parametrize("profile_name", PROFILES)
@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_spec_file_fields(profile_name, suffix, tmp_path):
    @profile(profile_name, examples=60)
    @given(
        where=st.sampled_from(
            [("", f) for f in SPEC_FIELDS]
            + [("moe", f) for f in MOE_FIELDS]
            + [("mla", f) for f in MLA_FIELDS]
            + [("", "unknown_key")]
        ),
        value=odd_value(),
    )
    def run(where, value):
        table, name = where
        doc = dict(SPEC_BASE)
        if table == "moe":
            doc |= {"family": "mixtral", "layer_pattern": ["full-moe"]}
            doc["moe"] = dict(MOE_BASE) | {name: value}
        elif table == "mla":
            doc |= {"family": "deepseek_v2", "num_kv_heads": 4}
            doc["mla"] = dict(MLA_BASE) | {name: value}
        else:
            doc[name] = value
        path = tmp_path / f"spec{suffix}"
        path.write_text(to_toml(doc) if suffix == ".toml" else to_json(doc))
        hint = HINTS[table].get(name)
        bad = name == "unknown_key" or impossible(hint, value) and value is not None
        if suffix == ".toml" and value is None or isinstance(value, list) and None in value:
            bad = False  # TOML has no null: the field is left out
        _file_check(path, _estimate(path), valid=False if bad else None)

    run()


@pytest.mark.parametrize("profile_name", PROFILES)
@pytest.mark.parametrize("base", sorted(HF_BASES))
def test_hf_config_fields(profile_name, base, tmp_path):
    keys = sorted(HF_BASES[base]) + ["head_dim", "num_key_value_heads", "layer_types"]

    @profile(profile_name, examples=60)
    @given(key=st.sampled_from(keys), value=odd_value(), drop=st.booleans())
    def run(key, value, drop):
        doc = dict(HF_BASES[base])
        if drop and key != "model_type":
            doc.pop(key, None)
        else:
            doc[key] = value
        path = tmp_path / "config.json"
        path.write_text(to_json(doc))
        bad = (
            not drop
            and key in HF_NUMBERS
            and not (base == "deepseek" and key == "head_dim")  # MLA reads its own head dims
            and value is not None
            and (impossible(int, value) or isinstance(value, (int, float)) and value <= 0)
        )
        _file_check(path, _estimate(path), valid=False if bad else None)

    run()


@pytest.mark.parametrize("profile_name", PROFILES)
def test_profile_fields(profile_name, tmp_path):
    @profile(profile_name, examples=60)
    @given(
        key=st.sampled_from([*PROFILE_FIELDS, "unknown_key"]),
        value=odd_value(),
        command=st.sampled_from(["estimate", "plan", "show"]),
    )
    def run(key, value, command):
        doc = dict(PROFILE_BASE) | {key: value}
        path = tmp_path / "gpu.toml"
        path.write_text(to_toml(doc))
        argv = {
            "estimate": ["estimate", "--gpu", str(path), "--format", "json"],
            "plan": ["plan", "--gpu", str(path), "--max-gpus", "2", "--top", "2"],
            "show": ["profiles", "show", str(path)],
        }[command]
        bad = key == "unknown_key" or impossible(HINTS["profile"].get(key), value)
        _file_check(path, argv, valid=False if bad and value is not None else None)

    run()


@pytest.mark.parametrize("profile_name", PROFILES)
def test_quiz_progress_fields(profile_name, tmp_path):
    record = PROGRESS_BASE["questions"]["attn-eager-keeps-scores"]  # type: ignore[index]

    @profile(profile_name, examples=60)
    @given(
        where=st.sampled_from(
            [("top", k) for k in ("version", "questions", "extra")]
            + [("record", k) for k in [*record, "extra"]]
            + [("history", k) for k in ("answer", "at", "correct", "extra")]
        ),
        value=odd_value(),
        stats=st.booleans(),
    )
    def run(where, value, stats):
        doc = json.loads(json.dumps(PROGRESS_BASE))
        table, key = where
        rec = doc["questions"]["attn-eager-keeps-scores"]
        {"top": doc, "record": rec, "history": rec["history"][0]}[table][key] = value
        path = tmp_path / "quiz.json"
        path.write_text(to_json(doc))
        if stats:
            argv = ["quiz", "--stats", "--progress", str(path)]
        else:
            argv = [
                "quiz",
                "--answers",
                "a",
                "--count",
                "1",
                "--seed",
                "1",
                "--progress",
                str(path),
            ]
        before = path.read_bytes()
        result = check(argv, names=[str(path), path.name])
        if result.code != 0:
            assert path.read_bytes() == before, "a refused progress file was changed"

    run()


# --- whole files: random bytes, deep nesting, huge numbers ---------------------------------

KINDS = {
    "spec.toml": lambda p: _estimate(p),
    "spec.json": lambda p: _estimate(p),
    "config.json": lambda p: _estimate(p),
    "gpu.toml": lambda p: ["estimate", "--gpu", str(p)],
    "gpu.json": lambda p: ["profiles", "show", str(p)],
    "quiz.json": lambda p: ["quiz", "--stats", "--progress", str(p)],
}


def nested(depth: int, kind: str) -> bytes:
    if kind.endswith(".toml"):
        return ("a = " + "[" * depth + "]" * depth + "\n").encode()
    return ('{"model_type": "llama", "a": ' + "[" * depth + "]" * depth + "}").encode()


def broken_bytes() -> st.SearchStrategy[tuple[str, bytes]]:
    kinds = st.sampled_from(sorted(KINDS))
    raw = st.binary(max_size=300)
    utf8_prefix = st.tuples(kinds, raw).map(lambda kr: (kr[0], b'model_type = "llama"\n' + kr[1]))
    deep = st.tuples(kinds, st.sampled_from([50, 500, 5_000, 100_000])).map(
        lambda kd: (kd[0], nested(kd[1], kd[0]))
    )
    unclosed = st.tuples(kinds, st.sampled_from([1_000, 100_000])).map(
        lambda kd: (kd[0], b"[" * kd[1])
    )
    huge = st.tuples(
        kinds,
        st.sampled_from([5_000, 50_000]),
        st.sampled_from(["vocab_size", "num_layers", "memory_bytes", "version"]),
    ).map(
        lambda t: (
            t[0],
            (
                f"{t[2]} = {'9' * t[1]}\n"
                if t[0].endswith(".toml")
                else f'{{"{t[2]}": {"9" * t[1]}}}'
            ).encode(),
        )
    )
    floats = st.tuples(
        kinds, st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "nan", "inf"])
    ).map(
        lambda t: (
            t[0],
            (
                f"num_layers = {t[1]}\n" if t[0].endswith(".toml") else f'{{"num_layers": {t[1]}}}'
            ).encode(),
        )
    )
    return st.one_of(st.tuples(kinds, raw), utf8_prefix, deep, unclosed, huge, floats)


@pytest.mark.parametrize("profile_name", PROFILES)
def test_broken_files(profile_name, tmp_path):
    @profile(profile_name, examples=60)
    @given(case=broken_bytes())
    def run(case):
        kind, content = case
        path = tmp_path / kind
        path.write_bytes(content)
        _file_check(path, KINDS[kind](path))

    run()


@pytest.mark.parametrize("profile_name", PROFILES)
def test_odd_paths(profile_name, tmp_path):
    """Paths that are directories, missing, too long, or hold odd characters."""
    (tmp_path / "adir.json").mkdir(exist_ok=True)
    (tmp_path / "adir.toml").mkdir(exist_ok=True)

    @profile(profile_name, examples=60)
    @given(
        path=st.sampled_from(
            [
                str(tmp_path / "adir.json"),
                str(tmp_path / "adir.toml"),
                str(tmp_path / "missing.json"),
                str(tmp_path / "missing.toml"),
                str(tmp_path / ("a" * 300 + ".json")),
                str(tmp_path / ("a" * 300 + ".toml")),
                "/" + "/".join(["d"] * 3000) + ".json",
                str(tmp_path / "nul\x00.json"),
            ]
        )
        | st.text(min_size=1, max_size=40).map(lambda t: str(tmp_path / t) + ".json"),
        flag=st.sampled_from(["--model", "--gpu", "--progress"]),
    )
    def run(path, flag):
        argv = {
            "--model": ["estimate", "--model", path],
            "--gpu": ["estimate", "--gpu", path],
            "--progress": ["quiz", "--stats", "--progress", path],
        }[flag]
        check(argv, names=[flag, path[:60], Path(path).name[:60]])

    run()
