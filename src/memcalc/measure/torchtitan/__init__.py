"""``memcalc measure --framework torchtitan``: torchtitan's own model and ``parallelize_*``
functions on one rank of a ``--nproc`` run (``measure/distributed/worker.py``), counted with the
runner's CPU protocol (``runner._measure_cpu``: one warm-up step, one measured step; saved
tensors and ``LiveMemoryTracker``'s live bytes).

What the rank runs, as torchtitan's trainer does (T30 ``trainer.py`` ``Trainer.__init__`` /
``train_step``; T22 ``train.py``): the model config built from the ModelSpec
(``model.py``), the model on the meta device, ``parallelize_llama`` (tensor parallelism,
activation checkpointing, compile, FSDP2 with its MixedPrecisionPolicy), ``to_empty`` +
``init_weights``, torchtitan's optimizer container (fused AdamW), then per step
``zero_grad``, forward, torchtitan's cross-entropy divided by the global token count,
backward, ``clip_grad_norm_(foreach=True)`` and ``optimizer.step()`` (``step.py``).

What cannot run on a CPU, and how it is modelled instead (said in the report's notes):

- FlexAttention (0.3's default) has no CPU backward (``torch/nn/attention/flex_attention.py``
  ``_validate_device``): the rank runs torchtitan's ``ScaledDotProductAttention`` (its inner
  attention for SDPA, what the published runs used); the estimate's flex rule adds the fp32
  row maxima and the block mask to the same saved set.
- Context parallelism: torch's CP dispatcher has no rule for the CPU SDPA op
  (``_scaled_dot_product_flash_attention_for_cpu``) and flex has no CPU backward; the states'
  sharding over dp x cp is a GPU-only rule here.
- CUDA graphs (0.3's default) are CUDA only: the rank runs eagerly but keeps the gradients
  across steps (``zero_grad(set_to_none=False)``) as the graphed trainer does.
- gloo has no ``PREMUL_SUM``: torchtitan's gradient divide factor of 1 becomes a SUM
  (``FSDPModule.set_force_sum_reduction_for_comms``, as its symmetric-memory path does): the
  same bytes.
- 0.3's default ``spmd_backend="spmd_types"`` needs a torch nightly (torch 2.13's
  ``fully_shard`` refuses its plain-tensor parameters): the rank runs ``partial_dtensor``
  (DTensor tensor parallelism, FSDP2 on the flattened ``fsdp`` mesh).
"""
