"""torchtitan (pytorch/torchtitan) as data: its model code, activation checkpointing, FSDP2
wrapping and defaults, per release. Every rule cites the file it is read from; T30 is
torchtitan 0.3.0 (the PyPI wheel, byte-identical to branch ``release/0.3`` at 4f9e9a47d), T22
is 0.2.2 (tag ``v0.2.2``), t213 is torch 2.13.0.

The default (``--framework torchtitan``) is 0.3.0: it is what ``pip install torchtitan``
installs and what new runs use. 0.2.2 (``--framework torchtitan-0.2.2``) is the last release
with TOML job configs (``--config train.toml``) and layer-level selective checkpointing; its
model code has separate wq / wk / wv projections, so its op-level SAC saves other matmuls.
"""

from __future__ import annotations

from memcalc.frameworks.features import (
    Checkpointing,
    EveryKRule,
    Kernel,
    LayerCode,
    NormKernel,
    RotaryCache,
    SdpaGqa,
    SelectiveRule,
)

TORCHTITAN_FAMILIES = ("llama", "qwen3")
"""The HF families torchtitan has a model for that memcalc lowers with its code: Llama 3
(``models/llama3``; Llama 2 shapes run the same code) and Qwen3 (``models/qwen3``)."""

_COMMON: tuple[tuple[str, object], ...] = (
    # T30 models/common/nn_modules.py RMSNorm and T22 models/llama3/model/model.py use
    # torch.nn.RMSNorm (aten.rms_norm): fused on CUDA, composite on CPU (NormKernel).
    ("norm_kernel", NormKernel.torch_rms_norm),
    # T30 models/common/attention.py GQAttention / T22 Attention: enable_gqa = n_heads >
    # n_kv_heads, passed to F.scaled_dot_product_attention: k and v reach the kernel unrepeated.
    ("sdpa_gqa", SdpaGqa.enable_gqa),
    # the rotary cache is a module buffer (T30 models/common/rope.py ComplexRoPE / CosSinRoPE
    # ``cache``; T22 model.py ``freqs_cis``): sliced or viewed per layer, never made in forward
    ("rotary_tables_saved", False),
    # ComplexRoPE.apply_rotary_emb / T22 apply_rotary_emb: ``xq_out.type_as(xq)``
    ("rotary_keeps_q_dtype", True),
    # the model's positions come from the dataloader (an input), not made inside forward
    ("checkpoint_keeps_position_ids", False),
    # components/loss.py cross_entropy_loss: labels.flatten(0, 1), a view of the batch
    ("labels_view", True),
)

_PER_FAMILY: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = (
    # Llama 3: ComplexRoPE (T30 models/common/rope.py; T22 precompute_freqs_cis), a complex64
    # cache of width d/2; Qwen3: CosSinRoPE, an fp32 cos|sin cache of width 2d
    ("llama", (("complex_rotary", True),)),
)
T30_CODE = LayerCode(
    families=TORCHTITAN_FAMILIES,
    overrides=(
        *_COMMON,
        # T30 models/common/attention.py FusedQKVLinear.forward: one wqkv matmul, then
        # ``xq/xk/xv.reshape(...).contiguous()`` -- three copies; q and k are rebuilt by RoPE,
        # v's copy is what SDPA saves. (models/llama3/__init__.py _build_llama3_layers:
        # fuse_qkv=True.)
        ("qkv_copies", True),
        # T30 trainer: the dataloader always emits per-document positions
        # (hf_datasets/text_datasets.py) and the model passes them to RoPE, which gathers the
        # cache per layer (ComplexRoPE._reshape_cache: a (b, s, 1, d/2) complex64 tensor)
        ("rotary_gathered", True),
        # models/common/attention.py: ``self.rope = config.rope.build()`` in every attention,
        # its cache resized to training.seq_len (Llama3Model.Config.update_from_config)
        ("rotary_cache", RotaryCache.per_layer),
    ),
    per_family=_PER_FAMILY,
    source="torchtitan 0.3.0 models/llama3, models/qwen3, models/common",
)
T22_CODE = LayerCode(
    families=TORCHTITAN_FAMILIES,
    # T22 model.py Transformer: one ``freqs_cis`` buffer (precompute_freqs_cis(head_dim,
    # max_seq_len)), max_seq_len set to training.seq_len by update_from_config
    overrides=(*_COMMON, ("rotary_cache", RotaryCache.shared)),
    per_family=_PER_FAMILY,
    source="torchtitan 0.2.2 models/llama3/model/model.py, models/qwen3/model/model.py",
)

_SAC_SOURCE = "torchtitan {} distributed/activation_checkpoint.py"
_CUDA_SAVE = frozenset(
    {
        Kernel.mm,
        # t213 torch/_functorch/partitioners.py get_default_op_list().compute_intensive_ops
        # (flash / efficient SDPA), and the cuDNN, math and overrideable SDPA ops named by
        # torchtitan; the CPU flash op is in neither list
        Kernel.sdpa,
        Kernel.flex,
        Kernel.reduce_scatter,
        Kernel.amax,
    }
)
T30_CHECKPOINTING = Checkpointing(
    selective=SelectiveRule.op_sac,
    # SelectiveAC._get_default_save_ops: compute_intensive_ops (mm, _scaled_mm, SDPA),
    # aten.linear, aten.max, flex_attention, reduce_scatter_tensor, all_to_all_single; a
    # _scaled_mm is saved but not counted as a matmul (only aten.mm / aten.linear are)
    save_kernels=_CUDA_SAVE | {Kernel.scaled_mm},
    alternate_mm=True,
    every_k=EveryKRule.refused,
    budget=False,
    source=_SAC_SOURCE.format("0.3.0") + " SelectiveAC._wrap_block, FullAC",
    refusal=(
        "torchtitan 0.3.0 has op-level selective AC only (layer-level SAC was removed in "
        "#2357); its memory_budget mode is the compiler's min-cut partitioner"
    ),
)
T22_CHECKPOINTING = Checkpointing(
    selective=SelectiveRule.op_sac,
    # T22 models/llama3/infra/parallelize.py _op_sac_save_list: mm, the SDPA ops, flex,
    # reduce_scatter_tensor, max -- no _scaled_mm, so float8 matmuls are recomputed
    save_kernels=_CUDA_SAVE,
    alternate_mm=True,
    # T22 activation_checkpoint.py _apply_layer_sac: a global counter, wrapped when
    # count % selective_ac_option == 0 (1-based blocks N, 2N, ...)
    every_k=EveryKRule.layer_sac,
    budget=False,
    source=_SAC_SOURCE.format("0.2.2") + " _apply_op_sac, _apply_layer_sac, _apply_full_ac",
    refusal="torchtitan 0.2.2's memory_budget mode is the compiler's min-cut partitioner",
)

T30_DEFAULTS: tuple[tuple[str, object], ...] = (
    # T30 config/configs.py TrainingConfig: dtype float32, mixed_precision_param bfloat16,
    # mixed_precision_reduce float32 -- applied through fully_shard, which 0.3 always applies
    ("precision", "fsdp-bf16"),
    # components/optimizer/optimizer.py OptimizersContainer.Config: implementation "fused"
    ("optimizer_fused", True),
    # models/llama3/__init__.py model_registry(attn_backend="flex"); SDPA is refused for
    # language models (models/common/config_utils.py get_attention_config)
    ("attention", "flex"),
)
T22_DEFAULTS: tuple[tuple[str, object], ...] = (
    # T22 config/job_config.py Training.mixed_precision_param bfloat16 through fully_shard when
    # FSDP is on (otherwise torch.autocast: Framework.unsharded_precision)
    ("precision", "fsdp-bf16"),
    # T22 job_config.py Optimizer.implementation "fused"
    ("optimizer_fused", True),
    # T22 models/llama3/model/args.py TransformerModelArgs.attn_type "sdpa"
    ("attention", "sdpa"),
)
