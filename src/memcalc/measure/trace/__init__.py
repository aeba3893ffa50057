"""Trace any ``nn.Module`` into memcalc's op graph under FakeTensorMode: no memory is allocated.

The model is built inside ``torch._subclasses.fake_tensor.FakeTensorMode`` (its parameters are
fake tensors: shapes, dtypes and storages, no data), cast to the activation dtype of the
precision recipe, put in training mode and run forward on int64 token ids of shape (B, S)
(labels = ids), then backward. What the op graph needs is read from autograd itself:

* saved tensors: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves
  for backward; storages are identified by ``t.untyped_storage()._cdata`` (fake tensors have
  storages too), so views of one buffer count once, as in ``measure/tracker.py``. Parameter and
  buffer storages are excluded (they are counted as parameters).
* ops: the autograd graph from ``loss.grad_fn``: each node's ``_saved_*`` attributes (unpacked
  through the hook, so they are the same tensors) name the storages it saved; a node that saves
  an activation becomes one ``Op`` named after the node (``NativeLayerNormBackward0``), in
  forward order (``node._sequence_nr()``). A storage belongs to the first op that saves it.
* scopes: the decoder blocks are the children of the largest ``nn.ModuleList`` of modules of one
  type; module hooks note the autograd sequence number where each module (and block) starts and
  ends, so every node is placed in the prologue, one block or the epilogue, under a module path
  that names its component (attention, mlp, norm; embedding before the blocks, output after).
  A block's input is its first positional tensor; its other tensor arguments (RoPE cos/sin,
  masks) are shared by all blocks: saved, they are counted once in the prologue (as lower.py
  does), unsaved, they are what a per-block checkpoint keeps besides the input.
* attention core (what selective recompute drops): the matmuls of two activations (QK^T, AV;
  every other matmul has a weight operand), every node between them, and the copies and views
  that feed only them (repeat_kv). Its inputs, read from outside, are the core inputs (q, k, v
  before any expansion). Found by structure, not by an (S, S) shape, which q, k and v also have
  when head_dim == S. A fused SDPA/flash kernel has no core to drop, nor has an SDPA call
  that the CPU runs as a math composite of matmuls (MLA).
* dead branches: a storage saved only by nodes from which the loss cannot be reached (the
  values of a top-k whose indices alone are used: DeepSeek-V3's group top-k, the MoE aux loss's
  top-k) is freed before backward; it is left out and its bytes noted (``dead_branch_bytes``).
* FLOPs: the per-op formulas of ``torch.utils.flop_counter`` (FlopCounterMode's registry; matmuls
  and attention kernels only, no elementwise FLOPs) plus the grouped matmul of MoE experts, counted
  in a dispatch mode that attributes each op to the autograd node it creates; FLOPs of nodes that
  save nothing go to the first op of their scope, so block totals stay right.
* weight gradients: each trained parameter's ``AccumulateGrad`` node names its readers (through
  views and casts); the op of its last reader in forward order -- the first backward to reach it
  -- writes its gradient (``Op.params``), the op of its first reader owns it (``Op.weights``; a
  tied head's weight: the embedding), as the lowering places them (``graph._place_weights``).
  Frozen parameters (``requires_grad=False``) have no such node and no gradient.
* ``Op.grad_bytes`` is an approximation: 2 x the op's largest saved storage (its output gradient
  and one input gradient of about that size).

On CPU (where FakeTensorMode runs here) four things are routed to what a GPU runs, as ``measure``
does for real CPU runs: ``F.dropout`` to ``torch.native_dropout`` (1-byte bool masks),
``F.scaled_dot_product_attention`` with dropout to the flash kernel (q, k, v, out, logsumexp; the
CPU math fallback would keep the s x s probabilities in fp32), and transformers' packed-sequence
check (which cannot read fake position ids and would materialise a (b, 1, s, s) mask and disable GQA
in SDPA) to "not packed", which is what a real run of these inputs finds; and MoE experts whose
weights are not bf16 (fp32, autocast) to transformers' ``grouped_mm_fallback``, because the fake
kernel of ``aten._grouped_mm`` refuses fp32 (``fake.grouped_mm_in_any_dtype``). Other kernels save
what the CPU kernel saves (LayerNorm statistics in the input dtype; fp32 on CUDA).
"""

from memcalc.measure.trace.capture import find_blocks
from memcalc.measure.trace.common import Trace
from memcalc.measure.trace.params import param_counts
from memcalc.measure.trace.run import describe, trace_module, trace_spec, trace_target
from memcalc.measure.trace.targets import Target, parse_input_shape, resolve_target

__all__ = [
    "Target",
    "Trace",
    "describe",
    "find_blocks",
    "param_counts",
    "parse_input_shape",
    "resolve_target",
    "trace_module",
    "trace_spec",
    "trace_target",
]
