"""LoRA targets as PEFT 0.21.2 resolves them under transformers 5 (issue 20): for every tiny HF
family, PEFT's own ``get_peft_model`` with its default targets, ``all-linear`` and an MLP list
-- PEFT choosing the modules and parameters itself, not memcalc -- gives the trainable count
memcalc estimates, and what PEFT refuses memcalc refuses (exit 2, one line)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from memcalc.errors import MemcalcError
from memcalc.params import setup_param_counts
from memcalc.spec.finetune import LoraSpec
from memcalc.spec.loaders import load_model
from memcalc.spec.training import TrainingSetup

TINY = sorted((Path(__file__).parent / "data" / "hf" / "tiny").glob("*.json"))
TARGETS = {"default": (), "all-linear": ("all-linear",), "mlp": ("gate_proj", "up_proj")}


def _setup(targets: tuple[str, ...], dropout: float = 0.0) -> TrainingSetup:
    lora = LoraSpec(rank=4, targets=targets, dropout=dropout)
    return TrainingSetup(seq=8, precision="bf16", attention="eager", lora=lora)


def _peft_trainable(path: Path, targets: tuple[str, ...], dropout: float = 0.0) -> int | None:
    """PEFT's trainable count on the HF model, None when PEFT refuses."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from memcalc.measure.build import Impl, build_model

    spec = load_model(str(path))
    model = build_model(spec, _setup(()), Impl.hf, torch.device("cpu"))
    given = None if not targets else "all-linear" if targets == ("all-linear",) else list(targets)
    config = peft.LoraConfig(r=4, target_modules=given, lora_dropout=dropout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped = peft.get_peft_model(model, config)
    except ValueError:  # NoMatchingPeftModuleError is a ValueError too
        return None
    return wrapped.get_nb_trainable_parameters()[0]


def _memcalc_trainable(path: Path, targets: tuple[str, ...], dropout: float = 0.0) -> int | None:
    try:
        return setup_param_counts(load_model(str(path)), _setup(targets, dropout)).trainable
    except MemcalcError:
        return None


@pytest.mark.hf
@pytest.mark.parametrize("kind", sorted(TARGETS))
@pytest.mark.parametrize("path", TINY, ids=lambda p: p.stem)
def test_trainable_count_and_refusals_equal_pefts(path, kind):
    targets = TARGETS[kind]
    if kind == "mlp" and path.stem in ("gpt_neox", "opt", "phi3"):
        pytest.skip("no gate_proj / up_proj in this family")
    assert _memcalc_trainable(path, targets) == _peft_trainable(path, targets)


@pytest.mark.hf
@pytest.mark.parametrize("stem", ["mixtral", "qwen3_moe", "deepseek_v3", "qwen2_moe", "mistral"])
def test_lora_dropout_refused_where_pefts_param_wrapper_refuses_it(stem):
    path = next(p for p in TINY if p.stem == stem)
    assert _memcalc_trainable(path, ("all-linear",), 0.1) == _peft_trainable(
        path, ("all-linear",), 0.1
    )


def test_half_a_fused_pair_is_refused_with_pefts_reason():
    spec = load_model(str(next(p for p in TINY if p.stem == "qwen3_moe")))
    with pytest.raises(MemcalcError, match="--lora-targets: PEFT refuses gate_proj without"):
        setup_param_counts(spec, _setup(("gate_proj", "q_proj")))


def test_moe_defaults_refused_naming_the_flag(capsys):
    from memcalc.cli import main

    for stem in ("mixtral", "phi3"):
        path = next(p for p in TINY if p.stem == stem)
        assert main(["estimate", "--model", str(path), "--lora-rank", "8", "--seq", "8"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "--lora-targets" in err and "PEFT" in err
