"""Megatron-core's GPT model as it runs with Transformer Engine (``--framework megatron``).

Each module mirrors the Megatron-core / TE code it names and declares what autograd saves for
it, read from the sources (Megatron-LM ``d98e8a64``, TransformerEngine ``d0067d0d``):

- ``te_modules``: TE ``LayerNormLinear`` / ``Linear`` / ``LayerNorm`` / ``RMSNorm`` and
  Megatron's own ``ColumnParallelLinear`` (the output layer);
- ``attention``: the QKV split, fused or unfused rope, TE core attention by backend;
- ``mlp``: fused bias-GeLU / SwiGLU between ``linear_fc1`` and ``linear_fc2``;
- ``layer``: one ``TransformerLayer`` (attention, compiled bias-dropout-add, MLP);
- ``embedding`` / ``output``: ``LanguageModelEmbedding``, the final norm, the output layer and
  the vocab-parallel cross-entropy;
- ``moe``: the router, the token dispatchers and the experts.
"""
