"""``--config FILE`` (issue 25): the configs users already have give the same estimate, to the
byte of the JSON output, as the flags that say the same job -- written here by hand, per file.

Shipped example configs, read where their packages install them (each test skips without its
package; none is a memcalc dependency: ``pip install --no-deps trl deepspeed axolotl`` brings
the files): TRL's accelerate configs (``trl/accelerate_configs``), DeepSpeed's ZeRO templates
(``deepspeed/autotuning/config_templates``), axolotl's examples (``axolotl/integrations/*/
examples``). No installable package ships a TrainingArguments / SFTConfig file, a torchtitan
TOML or an adapter_config.json: those are written here by the projects' own code (the fields
and defaults of ``TrainingArguments`` / ``SFTConfig``, torchtitan 0.2's ``JobConfig``,
``LoraConfig.save_pretrained``)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import types
from enum import Enum
from pathlib import Path

import pytest

from conftest import run_cli
from memcalc.configs import read_config, read_configs
from memcalc.errors import MemcalcError


def installed(package: str) -> Path | None:
    """Where ``package`` is installed, without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def shipped(package: str, relative: str) -> Path:
    root = installed(package)
    if root is None:
        pytest.skip(f"{package} is not installed (pip install --no-deps {package})")
    path = root / relative
    if not path.is_file():
        pytest.skip(f"{package} does not ship {relative} in this version")
    return path


def same_json(config_args: list[str], flag_args: list[str]) -> tuple[str, str]:
    """The JSON of ``memcalc estimate`` with the config(s), and with the equivalent flags."""
    with_config = run_cli("estimate", *config_args, "--format", "json")
    with_flags = run_cli("estimate", *flag_args, "--format", "json")
    assert with_config.exit_code == 0, with_config.stderr
    assert with_flags.exit_code == 0, with_flags.stderr
    assert json.loads(with_config.stdout) == json.loads(with_flags.stdout)
    return with_config.stderr, with_flags.stderr


# ---------------------------------------------------------------------------------------------
# shipped: TRL's accelerate configs

TRL_ACCELERATE = {
    # file: the flags that say the same job (llama-3-8b on H100s)
    "fsdp1.yaml": ["--dp", "8", "--zero", "3", "--precision", "amp-bf16"],
    "fsdp2.yaml": ["--dp", "8", "--zero", "3", "--fsdp-reshard", "true", "--precision", "amp-bf16"],
    "multi_gpu.yaml": ["--dp", "8", "--precision", "amp-bf16"],
    "single_gpu.yaml": ["--precision", "amp-bf16"],
    # accelerate's DeepSpeed plugin runs DeepSpeed's ZeRO engine
    "zero1.yaml": [
        *("--dp", "8", "--zero", "1", "--microbatches", "1", "--precision", "bf16-mixed"),
        *("--zero-engine", "deepspeed"),
    ],
    "zero2.yaml": [
        "--dp",
        "8",
        "--zero",
        "2",
        "--precision",
        "bf16-mixed",
        "--zero-engine",
        "deepspeed",
    ],
    "zero3.yaml": [
        "--dp",
        "8",
        "--zero",
        "3",
        "--precision",
        "bf16-mixed",
        "--zero-engine",
        "deepspeed",
    ],
}


@pytest.mark.parametrize("name", sorted(TRL_ACCELERATE))
def test_trl_accelerate_config_is_its_flags(name):
    path = shipped("trl", f"accelerate_configs/{name}")
    model = ["--model", "llama-3-8b"]
    stderr, _ = same_json([*model, "--config", str(path)], [*model, *TRL_ACCELERATE[name]])
    assert f"note: --config {path}: read as: accelerate config" in stderr


def test_accelerate_single_gpu_says_its_processes_do_not_count():
    path = shipped("trl", "accelerate_configs/single_gpu.yaml")
    assert "num_processes: 8 with distributed_type NO: one process" in " ".join(
        read_config(path).warnings
    )


def test_fsdp1_forward_prefetch_is_a_warning():
    path = shipped("trl", "accelerate_configs/fsdp1.yaml")
    (warning,) = read_config(path).warnings
    assert warning.endswith(
        "fsdp_config.fsdp_forward_prefetch: True: FSDP's forward prefetch is not modelled"
    )


# ---------------------------------------------------------------------------------------------
# shipped: DeepSpeed's ZeRO templates

DEEPSPEED_TEMPLATES = {
    # no bf16 / fp16 section: DeepSpeed trains in fp32
    "template_zero0.json": ["--zero", "0", "--precision", "fp32"],
    # a ZeRO stage runs under DeepSpeed's engine, its buckets as --ds settings
    "template_zero1.json": [
        *("--zero", "1", "--zero-engine", "deepspeed", "--precision", "fp32"),
        *("--ds", "reduce_bucket_size=5e8", "--ds", "allgather_bucket_size=5e8"),
    ],
    # contiguous_gradients false: DeepSpeed's non-contiguous path is not modelled, torch's ZeRO
    "template_zero2.json": ["--zero", "2", "--precision", "fp32"],
    "template_zero3.json": ["--zero", "3", "--precision", "fp32"],
}


@pytest.mark.parametrize("name", sorted(DEEPSPEED_TEMPLATES))
def test_deepspeed_template_is_its_flags(name):
    """With --dp 8 given beside the file (flags and files together)."""
    path = shipped("deepspeed", f"autotuning/config_templates/{name}")
    base = ["--model", "llama-2-7b", "--dp", "8"]
    stderr, _ = same_json([*base, "--config", str(path)], [*base, *DEEPSPEED_TEMPLATES[name]])
    assert "read as: DeepSpeed config" in stderr


def test_deepspeed_what_its_engine_does_not_model_is_named():
    path = shipped("deepspeed", "autotuning/config_templates/template_zero3.json")
    (warning,) = read_config(path).warnings
    assert warning == (
        f"--config {path}: zero_optimization: DeepSpeed's ZeRO engine with contiguous_gradients "
        "false (its non-contiguous reduction path) not modelled: estimated under torch's ZeRO"
    )
    one = read_config(shipped("deepspeed", "autotuning/config_templates/template_zero1.json"))
    assert one.warnings == [] and one.options == {
        "precision": "fp32",
        "zero": 1,
        "zero_engine": "deepspeed",
        "ds": ["reduce_bucket_size=500000000", "allgather_bucket_size=500000000"],
    }


# ---------------------------------------------------------------------------------------------
# shipped: axolotl's examples

AXOLOTL = {
    "hatchery/examples/tinker_sft.yaml": [
        *("--model", "qwen3-8b", "--batch", "2", "--microbatches", "1", "--seq", "2048"),
        *("--optimizer", "adamw", "--precision", "fp32"),
    ],
    "hatchery/examples/tinker_rl.yaml": [
        *("--model", "qwen3-8b", "--batch", "1", "--microbatches", "1", "--seq", "2048"),
        *("--optimizer", "adamw", "--precision", "fp32"),
    ],
    "nemo_gym/examples/nemo_gym_sudoku.yaml": [
        *("--model", "qwen2.5-1.5b", "--batch", "1", "--microbatches", "64", "--seq", "4096"),
        *("--optimizer", "adamw-8bit", "--precision", "fp32"),
    ],
    "nemo_gym/examples/nemo_gym_multi_env.yaml": [
        *("--model", "qwen2.5-1.5b", "--batch", "1", "--microbatches", "64", "--seq", "4096"),
        *("--optimizer", "adamw-8bit", "--precision", "fp32"),
    ],
}


@pytest.mark.parametrize("name", sorted(AXOLOTL))
def test_axolotl_example_is_its_flags(name):
    path = shipped("axolotl", f"integrations/{name}")
    stderr, _ = same_json(
        ["--gpu", "a100", "--config", str(path)], ["--gpu", "a100", *AXOLOTL[name]]
    )
    assert "read as: axolotl config" in stderr
    assert "a plugin's settings are not modelled" in stderr


def test_axolotl_rl_example_says_what_is_not_modelled():
    path = shipped("axolotl", "integrations/nemo_gym/examples/nemo_gym_sudoku.yaml")
    fields = {w.split(": ")[1] for w in read_config(path).warnings}
    assert {"plugins", "rl", "trl"} <= fields


# ---------------------------------------------------------------------------------------------
# written by the projects' own code: TrainingArguments / SFTConfig, LoraConfig, JobConfig


def defaults(cls: type) -> dict:
    """A dataclass's fields with their defaults, as ``to_dict`` writes them (enums as
    values)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        out[f.name] = value.value if isinstance(value, Enum) else value
    return out


def test_training_arguments_json_is_its_flags(tmp_path):
    transformers = pytest.importorskip("transformers")
    args = defaults(transformers.TrainingArguments) | {
        "output_dir": "out",
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,  # DeepSpeed's offload with accumulation: not modelled
        "bf16": True,
        "gradient_checkpointing": True,
        "deepspeed": {
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
            "bf16": {"enabled": "auto"},
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto",
        },
    }
    path = tmp_path / "training_args.json"
    path.write_text(json.dumps(args, default=str))
    base = ["--model", "llama-3-8b", "--dp", "8"]
    flags = [
        *("--batch", "4", "--microbatches", "1", "--precision", "bf16-mixed"),
        *("--recompute", "full", "--optimizer", "adamw", "--fused", "--zero", "2"),
        *("--offload", "optimizer=cpu", "--zero-engine", "deepspeed"),
    ]
    stderr, _ = same_json([*base, "--config", str(path)], [*base, *flags])
    assert "read as: HF TrainingArguments" in stderr


def test_training_arguments_without_bf16_train_in_fp32(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = tmp_path / "args.json"
    path.write_text(json.dumps(defaults(transformers.TrainingArguments) | {"output_dir": "o"}))
    assert read_config(path).options == {
        "batch": 8,
        "microbatches": 1,
        "optimizer": "adamw",
        "fused": True,
        "precision": "fp32",
    }


def test_trl_sft_config_yaml_is_its_flags(tmp_path):
    """``trl sft --config``: SFTConfig and ModelConfig fields in one YAML; SFTConfig's own
    defaults (bf16, gradient checkpointing) apply."""
    yaml = pytest.importorskip("yaml")
    if installed("trl") is None:
        pytest.skip("trl is not installed")
    from trl import ModelConfig, SFTConfig

    cfg = defaults(SFTConfig) | defaults(ModelConfig)
    cfg |= {
        "output_dir": "out",
        "per_device_train_batch_size": 2,
        "max_length": 4096,
        "use_liger_kernel": True,
        "model_name_or_path": "Qwen/Qwen3-8B",
        "use_peft": True,
        "lora_r": 32,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "load_in_4bit": True,
        "use_bnb_nested_quant": True,
        "dtype": "bfloat16",
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(cfg, default=str))))
    flags = [
        *("--model", "qwen3-8b", "--batch", "2", "--microbatches", "1", "--seq", "4096"),
        *("--loss", "fused", "--recompute", "full", "--optimizer", "adamw", "--fused"),
        *("--lora-rank", "32", "--lora-alpha", "32", "--lora-dropout", "0.05"),
        *("--lora-targets", "q_proj,k_proj,v_proj,o_proj", "--quantize", "nf4-dq"),
        *("--precision", "bf16", "--gpu", "4090"),
    ]
    stderr, _ = same_json(["--gpu", "4090", "--config", str(path)], flags)
    assert "read as: TRL SFTConfig" in stderr
    assert "use_liger_kernel: true: Liger's fused linear cross-entropy is --loss fused" in stderr


def _lora_config(tmp_path: Path, name: str, base: str, **kwargs) -> Path:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(task_type="CAUSAL_LM", **kwargs)
    config.base_model_name_or_path = base  # as PeftModel sets it before saving
    folder = tmp_path / name
    config.save_pretrained(str(folder))
    return folder / "adapter_config.json"


def test_peft_adapter_config_is_its_flags(tmp_path):
    path = _lora_config(
        tmp_path,
        "llama",
        "meta-llama/Meta-Llama-3-8B",
        r=16,
        lora_alpha=32,
        lora_dropout=0.05,
        target_modules=["q_proj", "v_proj"],
    )
    flags = [
        *("--model", "llama-3-8b", "--lora-rank", "16", "--lora-alpha", "32"),
        *("--lora-dropout", "0.05", "--lora-targets", "q_proj,v_proj"),
    ]
    stderr, _ = same_json(["--config", str(path)], flags)
    assert "read as: PEFT adapter config" in stderr


def test_peft_all_linear_with_modules_to_save_is_its_flags(tmp_path):
    path = _lora_config(
        tmp_path,
        "qwen",
        "Qwen/Qwen2.5-7B",
        r=8,
        target_modules="all-linear",
        modules_to_save=["lm_head"],
    )
    flags = [
        *("--model", "qwen2.5-7b", "--lora-rank", "8", "--lora-alpha", "8"),
        *("--lora-dropout", "0", "--lora-targets", "all-linear", "--modules-to-save", "lm_head"),
    ]
    same_json(["--config", str(path)], flags)


def _job_config_defaults() -> dict:
    """torchtitan 0.2's JobConfig defaults (torchtitan/config/job_config.py, loaded alone:
    the package's __init__ needs its training dependencies)."""
    root = installed("torchtitan")
    source = root / "config" / "job_config.py" if root else None
    if source is None or not source.is_file():
        pytest.skip("torchtitan 0.1 / 0.2 (with config/job_config.py) is not installed")
    pytest.importorskip("torch")
    logging_stub = types.ModuleType("torchtitan.tools.logging")
    logging_stub.logger = __import__("logging").getLogger("torchtitan")
    saved = {
        k: sys.modules.get(k) for k in ("torchtitan", "torchtitan.tools", logging_stub.__name__)
    }
    sys.modules.update(
        {
            "torchtitan": types.ModuleType("torchtitan"),
            "torchtitan.tools": types.ModuleType("torchtitan.tools"),
            logging_stub.__name__: logging_stub,
        }
    )
    try:
        spec = importlib.util.spec_from_file_location("_job_config", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return dataclasses.asdict(module.JobConfig())
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _toml(tables: dict) -> str:
    """TOML of a JobConfig dict (tables of scalars and lists; None and the few table-valued
    fields, all empty by default, left out)."""
    lines = []
    for table, fields in tables.items():
        lines.append(f"[{table}]")
        for key, value in fields.items():
            if (
                value is None
                or isinstance(value, dict)
                or (isinstance(value, list) and any(isinstance(v, list) for v in value))
            ):
                continue
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


TORCHTITAN = {
    "llama3_8b_fsdp": (
        {
            "model": {"name": "llama3", "flavor": "8B"},
            "training": {"local_batch_size": 1, "seq_len": 8192},
            "parallelism": {"data_parallel_shard_degree": 8},
            "activation_checkpoint": {"mode": "full"},
        },
        [
            *("--model", "llama-3.1-8b", "--batch", "1", "--seq", "8192", "--dp", "8"),
            *("--zero", "3", "--recompute", "full", "--precision", "fsdp-bf16", "--optimizer"),
            *("adamw", "--fused", "--framework", "torchtitan-0.2.2"),
        ],
    ),
    "qwen3_tp2": (
        {
            "model": {"name": "qwen3", "flavor": "0.6B"},
            "training": {"local_batch_size": 4, "seq_len": 2048},
            "parallelism": {"data_parallel_shard_degree": 2, "tensor_parallel_degree": 2},
            "activation_checkpoint": {"mode": "none"},
        },
        [
            *("--model", "qwen3-0.6b", "--batch", "4", "--seq", "2048", "--dp", "2", "--zero", "3"),
            *("--tp", "2", "--recompute", "none", "--precision", "fsdp-bf16", "--optimizer"),
            *("adamw", "--fused", "--framework", "torchtitan-0.2.2"),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(TORCHTITAN))
def test_torchtitan_toml_is_its_flags(name, tmp_path):
    changes, flags = TORCHTITAN[name]
    job = _job_config_defaults()
    for table, fields in changes.items():
        job[table] |= fields
    path = tmp_path / f"{name}.toml"
    path.write_text(_toml(job))
    stderr, _ = same_json(["--config", str(path)], flags)
    assert "read as: torchtitan config" in stderr


# ---------------------------------------------------------------------------------------------
# the rules around the readers


def test_a_flag_overrides_the_file_and_plan_says_what_it_searches(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 3},
                "train_batch_size": 64,
                "train_micro_batch_size_per_gpu": 2,
            }
        )
    )
    with_flag = run_cli(
        "estimate",
        "--config",
        str(path),
        "--zero",
        "1",
        "--dp",
        "4",
        "--recompute",
        "full",
        "--format",
        "json",
    )
    record = json.loads(with_flag.stdout)
    assert record["layout"]["zero"] == 1 and record["batch"] == 2
    assert "train_batch_size" not in with_flag.stderr or "global_batch" in with_flag.stderr
    plan = run_cli(
        "plan", "--model", "gpt2", "--config", str(path), "--max-gpus", "4", "--format", "json"
    )
    assert plan.exit_code == 0, plan.stderr
    assert json.loads(plan.stdout)["global_batch"] == 64
    assert "plan searches these itself, so the file's are not fixed: zero 3" in plan.stderr


def test_repeated_configs_merge_later_wins_and_says_so(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(
        json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})
    )
    b.write_text(
        json.dumps({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})
    )
    read = read_configs([a, b])
    assert read.options == {
        "precision": "fp32",
        "zero": 3,
        "offload": ["optimizer=cpu", "params=cpu"],
        "zero_engine": "deepspeed",
    }
    assert read.warnings == (f"--config {b}: zero 3 replaces 2 from {a}",)


def test_a_file_of_no_known_kind_is_one_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("foo: 1\n")
    with pytest.raises(
        MemcalcError,
        match=r"cannot tell which kind of config this is; memcalc "
        r"reads: DeepSpeed JSON",
    ):
        read_config(path)
    result = run_cli("estimate", "--config", str(path))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1


def test_a_bad_value_names_the_file_and_field(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": "three"}}))
    result = run_cli("estimate", "--config", str(path))
    assert result.exit_code == 2
    assert f"--config {path}: zero_optimization.stage: expected an integer, got 'three'" in (
        result.stderr
    )


def test_the_api_takes_config(tmp_path):
    import memcalc

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    b = memcalc.estimate("llama-2-7b", config=[str(path)], dp=8, recompute="full")
    assert (b.setup.parallel.zero, b.setup.parallel.dp) == (2, 8)
    assert memcalc.estimate("llama-2-7b", config=str(path), zero=1).setup.parallel.zero == 1
