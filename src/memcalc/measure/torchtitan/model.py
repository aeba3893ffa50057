"""A ModelSpec as a torchtitan Llama 3: the 0.3.0 model config (``models/llama3/__init__.py``
``_build_llama3_layers`` + ``Llama3Model.Config``) or the 0.2.2 ``TransformerModelArgs``, built
on the meta device and parallelized by torchtitan's own ``parallelize_llama``."""

from __future__ import annotations

from typing import Any

from memcalc.errors import MemcalcError
from memcalc.spec.model import Family, ModelSpec

INSTALL = (
    "pip install torch==2.13.0 -e '.[torchtitan]' (torchtitan 0.3.0, triton, torchao); for "
    "0.2.2: pip install --no-deps torchtitan==0.2.2 --target DIR and put DIR on PYTHONPATH"
)


def torchtitan_version() -> str:
    """The installed torchtitan's version (a one-line error when it is missing)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        import torchtitan
    except ImportError:
        raise MemcalcError(f"--framework torchtitan needs torchtitan: {INSTALL}") from None
    try:
        return str(version("torchtitan"))
    except PackageNotFoundError:  # a --target install without its metadata
        return str(getattr(torchtitan, "__version__", "unknown"))


def check_spec(spec: ModelSpec, version: str) -> None:
    """What measure can build as torchtitan's Llama 3."""
    if spec.family is not Family.llama:
        raise MemcalcError(
            f"--framework torchtitan: measure builds torchtitan's Llama 3; {spec.name} is "
            f"{spec.family.value} (the estimate also lowers torchtitan's Qwen3)"
        )
    if spec.head_size * spec.num_heads != spec.hidden_size:
        raise MemcalcError(
            "--framework torchtitan: torchtitan's Llama 3 has head_dim = dim / n_heads; "
            f"{spec.name} has head_dim {spec.head_size}"
        )
    if spec.tie_embeddings and version.startswith("0.2"):
        raise MemcalcError("--framework torchtitan-0.2.2: its Llama 3 has no weight tying")


def llama3_config_030(spec: ModelSpec, seq: int, attention: str) -> Any:
    """torchtitan 0.3.0's ``Llama3Model.Config`` of ``spec`` (fused wqkv, ComplexRoPE, the
    inner attention torchtitan's ``ScaledDotProductAttention`` for ``attention == "sdpa"``:
    0.3 refuses SDPA for language models in ``get_attention_config``, but the class is the
    inner attention its Flux model and every published run used)."""
    import torch
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import _build_llama3_layers
    from torchtitan.models.llama3.model import Llama3Model

    d, heads = spec.hidden_size, spec.num_heads
    layers = _build_llama3_layers(
        fuse_qkv=True,
        n_layers=spec.num_layers,
        dim=d,
        n_heads=heads,
        n_kv_heads=spec.kv_heads,
        hidden_dim=spec.mlp_size,
        rope=ComplexRoPE.Config(dim=d // heads, max_seq_len=seq, theta=500000),
        attn_backend="flex",
    )
    if attention == "sdpa":
        for layer in layers:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return Llama3Model.Config(
        dim=d,
        vocab_size=spec.vocab_size,
        tok_embeddings=Embedding.Config(
            num_embeddings=spec.vocab_size,
            embedding_dim=d,
            param_init={"weight": torch.nn.init.normal_},
        ),
        norm=RMSNorm.Config(normalized_shape=d, param_init={"weight": torch.nn.init.ones_}),
        lm_head=Linear.Config(in_features=d, out_features=spec.vocab_size),
        layers=layers,
        enable_weight_tying=spec.tie_embeddings,
    )


def llama3_args_022(spec: ModelSpec, seq: int) -> Any:
    """torchtitan 0.2.2's ``TransformerModelArgs`` of ``spec``. Its ``FeedForward`` sizes the
    hidden layer as ``multiple_of * ceil(int(m * int(8 d / 3)) / multiple_of)``; with
    ``multiple_of = 1`` and ``m = (I + 0.5) / int(8 d / 3)`` that is ``I``."""
    from torchtitan.models.llama3.model.args import TransformerModelArgs

    base = int(2 * 4 * spec.hidden_size / 3)
    args = TransformerModelArgs(
        dim=spec.hidden_size,
        n_layers=spec.num_layers,
        n_heads=spec.num_heads,
        n_kv_heads=spec.kv_heads,
        vocab_size=spec.vocab_size,
        multiple_of=1,
        ffn_dim_multiplier=(spec.mlp_size + 0.5) / base,
        rope_theta=500000,
        max_seq_len=seq,
    )
    return args


def check_layout(spec: ModelSpec, setup: Any, recompute: Any, nproc: int, device: str) -> None:
    """A one-line MemcalcError when ``measure --framework torchtitan`` cannot run this."""
    from memcalc.spec.training import Attention, OptimizerKind, Precision
    from memcalc.strategies.recompute import Recompute

    fw, par = setup.framework_def, setup.parallel
    installed = torchtitan_version()
    if not installed.startswith(fw.version.rsplit(".", 1)[0]):
        raise MemcalcError(
            f"--framework {fw.label}: measures torchtitan {fw.version}, installed is "
            f"{installed} ({INSTALL})"
        )
    check_spec(spec, fw.version)
    if par.world_size != nproc:
        raise MemcalcError(
            f"--nproc: {nproc} ranks, but the layout has dp x tp x pp x cp = {par.world_size}"
        )
    refused = {
        "--pp": par.pp > 1 and "torchtitan's pipeline schedules are not measured",
        "--cp": par.cp > 1
        and "context parallelism does not run on CPU (torch's CP dispatcher has no rule for "
        "aten._scaled_dot_product_flash_attention_for_cpu; FlexAttention has no CPU backward)",
        "--ep": par.ep > 1 and "expert parallelism is not measured",
        "--microbatches": par.microbatches > 1 and "gradient accumulation is not measured",
        "--attention": setup.attention is not Attention.sdpa
        and "FlexAttention has no CPU backward (torch/nn/attention/flex_attention.py "
        "_validate_device); measure runs torchtitan's ScaledDotProductAttention: use sdpa",
        "--precision": setup.precision not in (Precision.fsdp_bf16, Precision.fp32)
        and "measure runs torchtitan's MixedPrecisionPolicy (fsdp-bf16) or fp32",
        "--optimizer": setup.optimizer is not OptimizerKind.adamw
        and "measure runs torchtitan's default_adamw",
        "--lora-rank": setup.lora is not None and "torchtitan's LoRA is not measured",
        "--recompute": recompute is Recompute.budget
        and "torchtitan's memory_budget mode needs compile",
        "--shard-size": par.shard_size is not None and "HSDP is not measured",
    }
    for flag, why in refused.items():
        if why:
            raise MemcalcError(f"{flag}: {why} (--framework {fw.label})")
    if device != "cpu":
        raise MemcalcError("--device: measure runs torchtitan on CPU ranks (gloo) only")
