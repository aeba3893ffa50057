"""The lowering cache keys on everything the lowering reads: for every field of TrainingSetup and
Parallelism, a setup changed in that field either has another cache key or lowers to the same
graph. (The planner and the snapshot grid estimate many setups in one process: a field missing
from the key hands one setup another's graph -- the torch-parallel estimate of llama-2-7b came
out with Megatron's saved tensors after a plan had lowered the Megatron one.)"""

import itertools
from dataclasses import fields

import pytest

from memcalc.errors import MemcalcError
from memcalc.frameworks import FrameworkName, ShardingEngine
from memcalc.graph.lower import lower, lower_cached, lowering_key
from memcalc.spec.deepspeed import DeepSpeedZero
from memcalc.spec.finetune import LoraSpec, Quantize
from memcalc.spec.loaders import load_model
from memcalc.spec.megatron import AttentionBackend, MegatronOptions, TransformerImpl
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import Attention, Loss, OptimizerKind, Precision, TrainingSetup
from memcalc.validate import FieldError

SPEC = load_model("tests/data/tiny-llama.toml")

SETUP_VALUES = {
    "batch": (3,),
    "seq": (48,),
    "precision": (Precision.fp32, Precision.amp_bf16, Precision.fp8_mixed),
    "grad_dtype": ("bf16",),
    "optimizer": (OptimizerKind.sgd, OptimizerKind.adafactor),
    "optimizer_foreach": (False,),
    "optimizer_fused": (True,),
    "attention": (Attention.eager,),
    "loss": (Loss.fused,),
    "dropout": (0.1,),
    "lora": (LoraSpec(rank=4), LoraSpec(rank=4, targets=("all-linear",), dropout=0.1)),
    "quantize": (Quantize.nf4,),
    "kbit_prep": (True, False),
    "input_grads": (True, False),
    "moe_imbalance": (2.0,),
    "capacity_factor": (1.25,),
    "framework": tuple(FrameworkName),
    "zero_engine": tuple(ShardingEngine),
    "deepspeed": (DeepSpeedZero(),),
    "megatron": (
        MegatronOptions(),
        MegatronOptions(transformer_impl=TransformerImpl.local),
        MegatronOptions(attention_backend=AttentionBackend.unfused),
        MegatronOptions(make_vocab_size_divisible_by=64),
    ),
}
PARALLEL_VALUES = {
    "dp": (1, 4),
    "tp": (1, 4),
    "pp": (1,),
    "cp": (1, 2),
    "cp_rotate": ("alltoall",),
    "ep": (1,),
    "etp": (1,),
    "sp": (False,),
    "vpp": (1,),
    "microbatches": (1, 4),
    "zero": (0, 1, 3),
    "fsdp_reshard": (False,),
    "shard_size": (None,),
    "bucket_view": (True,),
}
BASES = [
    TrainingSetup(batch=2, seq=32, parallel=Parallelism(dp=2, tp=2, zero=1)),
    # Megatron-core has no LoRA: HF's code, as read_inputs falls back to it (spec/compat.py)
    TrainingSetup(
        batch=1,
        seq=32,
        lora=LoraSpec(rank=8),
        framework=FrameworkName.hf,
        parallel=Parallelism(tp=2, sp=True, dp=2),
    ),
]


def _variants(base: TrainingSetup):
    for name in (f.name for f in fields(TrainingSetup)):
        for value in SETUP_VALUES.get(name, ()):
            yield f"{name}={value}", {name: value}
    for name in (f.name for f in fields(Parallelism)):
        for value in PARALLEL_VALUES[name]:
            yield f"parallel.{name}={value}", {"parallel": base.parallel.replace(**{name: value})}


def test_every_field_has_values_to_try():
    """A field added to either dataclass must be added here too."""
    assert set(SETUP_VALUES) == {f.name for f in fields(TrainingSetup)} - {"parallel"}
    assert set(PARALLEL_VALUES) == {f.name for f in fields(Parallelism)}


@pytest.mark.parametrize("base", BASES, ids=["tp2-zero1", "lora-tp2"])
def test_setups_with_one_key_lower_to_one_graph(base):
    plain = lower(SPEC, base)
    checked = 0
    for label, change in _variants(base):
        try:
            other = base.replace(**change)
            graph = lower(SPEC, other)
        except (FieldError, ValueError, MemcalcError):
            continue  # not a valid setup (e.g. cp without sdpa, LoRA under Megatron-core)
        if lowering_key(SPEC, other, "cuda") == lowering_key(SPEC, base, "cuda"):
            assert graph == plain, f"{label} changes the graph but not the cache key"
            checked += 1
    assert checked >= 10


def test_frameworks_are_cached_apart():
    setups = [
        TrainingSetup(batch=2, seq=32, framework=name, parallel=Parallelism(tp=2))
        for name in FrameworkName
    ]
    for first, second in itertools.permutations(setups, 2):
        lower_cached(SPEC, first)
        assert lower_cached(SPEC, second) == lower(SPEC, second)
