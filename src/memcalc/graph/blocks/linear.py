"""Linear layers (``nn.Linear``, HF ``Conv1D``) under every precision recipe."""

from __future__ import annotations

from dataclasses import dataclass

from memcalc.frameworks.features import Kernel
from memcalc.graph.ops import Component, Gemm, ParamTensor, Saved
from memcalc.graph.scope import FineTune, Scope, matmul_flops, tensor
from memcalc.spec.training import DType

WEIGHT_CAST = "weight_cast"
"""Name suffix of an autocast weight copy that autocast caches (counted by
``Block.weight_cast_bytes``): the cast of a leaf that requires grad (``autocast_mode.cpp``
``cached_cast``: ``arg.requires_grad() && arg.is_leaf()``)."""
UNCACHED_CAST = "weight_cast_uncached"
"""Name suffix of an autocast weight copy autocast does not cache (a frozen weight, PEFT's
merged ``W + BA``): saved by its matmul, freed with it -- gone under a checkpoint."""

PARAM_COMPONENT = {
    Component.attention: "attention",
    Component.mlp: "mlp",
    Component.output: "head",
    Component.embedding: "embedding",
    Component.norm: "norms",
}


def linear(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    tokens: int,
    n_in: int,
    n_out: int,
    out_dtype: DType,
    *,
    bias: bool = False,
    owns_weight: bool = True,
    out_tokens: int | None = None,
) -> Saved:
    """``aten.addmm`` / ``aten.mm`` (nn.Linear, HF Conv1D): saves the input (mat1) for the
    weight gradient; the weight (mat2) is a parameter and not an activation.

    Under fp8 training (Transformer Engine ``te.Linear``), the saved input is its fp8 cast
    (1 byte per element) instead; the name keeps the casts of one input shared.
    Under torch.autocast (``autocast_mode.cpp``: linear/addmm/mm are lower-precision ops), the
    input and the weight are cast to 16 bits and both casts are saved: the weight's cast is an
    activation of n_in x n_out 16-bit elements, held until this op's backward.
    ``owns_weight`` is False for an LM head tied to the embedding (its weight is counted there).
    ``out_tokens``: a row-parallel linear under sequence parallelism reduce-scatters its output
    to ``T / tp`` tokens (Megatron ``RowParallelLinear``); a column-parallel one all-gathers its
    input but saves the local shard (and gathers again in backward), so ``x`` is as saved --
    except under torch DTensor (``sc.gathered_inputs``), where the module's input is gathered
    first and the gathered ``tokens x n_in`` tensor is what the matmul saves (one storage for
    all the projections of that input: torch ``PrepareModuleInput`` + ``ColwiseParallel``).

    A frozen base weight (LoRA, ``memcalc.spec.finetune``) has no gradient, so nothing of the
    input is saved (under autocast its 16-bit cast is, for the input's gradient: autocast does
    not cache casts of weights that need no grad); quantized (bitsandbytes) it is stored as
    ``Quantize.storage_bytes`` and ``MatMul4Bit`` saves only the quantized weight
    (``_four_bit_keeps``).
    """
    out_tokens = tokens if out_tokens is None else out_tokens
    if sc.gathered_inputs and x.numel < tokens * n_in:
        x = Saved(f"{x.name}.all_gathered", tokens * n_in, x.dtype)
    sc.linears.add(name.rsplit(".", 1)[-1])
    base = _base_weight(sc, name, comp, n_in, n_out)
    out = tensor(f"{name}.out", out_tokens, n_out, out_dtype)
    sc.add(
        name,
        comp,
        _saved_for_backward(sc, base, x),
        matmul_flops(tokens, n_in, n_out),
        "aten.addmm/mm: saves mat1 (input) and mat2 (weight, a parameter)"
        if base.trainable
        else "frozen base linear (mm with a weight that needs no grad): saves no activation",
        grads=_grad_bytes(base, tokens, out_tokens, out_dtype),
        params=n_in * n_out if base.trainable else 0,
        weights=_weights(sc, base, x, bias=bias, owns_weight=owns_weight),
        work=Gemm(tokens, n_in, n_out, _gemm_dtype(sc, comp, x), 1, x.needs_grad, base.trainable),
        kernel=Kernel.mm.value,
        outputs=(out,),
    )
    adapted = _adapter(sc, base, x, tokens)
    if not (x.needs_grad or base.trainable or adapted):
        return Saved(out.name, out.numel, out.dtype, needs_grad=False)
    return out


@dataclass(frozen=True)
class _BaseWeight:
    """A linear's base weight (n_out x n_in) as this step holds it."""

    name: str
    comp: Component
    n_in: int
    n_out: int
    trainable: bool
    quant: str | None
    """Its bitsandbytes storage (a ``Quantize`` value) when frozen and quantized; else None."""


def _base_weight(sc: Scope, name: str, comp: Component, n_in: int, n_out: int) -> _BaseWeight:
    """Whether linear ``name``'s weight is trained, and how a frozen one is stored: the LM
    head and trained weights stay unquantized (``memcalc.spec.finetune``)."""
    ft = sc.finetune
    trainable = sc.trainable(name)
    quant = None
    if ft is not None and not trainable and comp is not Component.output:
        quant = ft.quantized(name)
    return _BaseWeight(name, comp, n_in, n_out, trainable, quant)


def _saved_for_backward(sc: Scope, base: _BaseWeight, x: Saved) -> list[Saved]:
    """What the matmul keeps for backward: its input (mat1) for the weight's gradient, or under
    fp8 training ``te.Linear``'s fp8 cast of it; LLM.int8's input attribute (``_int8_keeps``);
    under autocast the 16-bit cast of the weight."""
    name = base.name
    saved: list[Saved] = []
    if base.trainable:
        if sc.fp8_linears:
            saved = [Saved(f"{x.name}.fp8", x.numel, DType.fp8)]
        else:
            saved = [sc.matmul_input(x, name)]
    if base.quant == "int8" and x.needs_grad:
        saved.append(x)  # the int8 Function keeps its input as a ctx attribute (_int8_keeps)
        sc.attribute_held.setdefault(x.name, x)
    if sc.autocast is not None and base.quant is None and (x.needs_grad or base.trainable):
        # (a linear none of whose inputs needs grad records no node: nothing is saved)
        cast = WEIGHT_CAST if base.trainable else UNCACHED_CAST
        saved.append(Saved(f"{name}.{cast}", base.n_in * base.n_out, sc.autocast))
    return saved


def _weights(
    sc: Scope, base: _BaseWeight, x: Saved, *, bias: bool, owns_weight: bool
) -> tuple[ParamTensor, ...]:
    """The parameters the linear owns: its weight and bias (and the frozen originals PEFT keeps
    of a ``modules_to_save`` copy); for an LM head tied to the embedding, PEFT's trained copy
    only, if any."""
    name, ft, trainable, quant = base.name, sc.finetune, base.trainable, base.quant
    n_in, n_out = base.n_in, base.n_out
    if owns_weight:
        kind = PARAM_COMPONENT[base.comp]
        dtype = None if quant else sc.param_dtype(name)
        weights = (ParamTensor(f"{name}.weight", (n_out, n_in), kind, trainable, dtype, quant),)
        if bias:
            bias_dtype = _quantized_bias_dtype(quant, x) if quant else sc.param_dtype(name)
            weights += (ParamTensor(f"{name}.bias", (n_out,), kind, trainable, bias_dtype),)
        return weights + sc.frozen_originals(name, weights)
    if ft is not None and ft.keeps_original(name):
        # a tied head in modules_to_save: PEFT's trained copy is copy.deepcopy of the module,
        # a weight of its own (the frozen original stays tied to the embedding)
        kind = PARAM_COMPONENT[base.comp]
        return (ParamTensor(f"{name}.weight", (n_out, n_in), kind, True, sc.param_dtype(name)),)
    return ()


def _grad_bytes(base: _BaseWeight, tokens: int, out_tokens: int, out_dtype: DType) -> int:
    """The matmul's output and input gradients (``Op.grad_bytes``), and a quantized base's
    dequantized weight."""
    return (tokens * base.n_in + out_tokens * base.n_out) * out_dtype.itemsize + (
        # bitsandbytes dequantizes the weight to 16 bits for the input's gradient
        # (MatMul4Bit.backward: F.dequantize_4bit(B).to(grad dtype)): alive during backward
        2 * base.n_in * base.n_out if base.quant else 0
    )


def _adapter(sc: Scope, base: _BaseWeight, x: Saved, tokens: int) -> bool:
    """PEFT's ``lora.Linear`` around the linear when it is a LoRA target (``_lora``): True
    when it is."""
    ft = sc.finetune
    if ft is None or not ft.adapts(base.name):
        return False
    _lora(sc, ft, base.name, base.comp, x, tokens, base.n_in, base.n_out)
    return True


def _int8_keeps() -> None:
    """LLM.int8 keeps the layer input for backward as a ctx *attribute*, on both devices, so
    saved-tensor hooks do not see it and a checkpoint does not drop it (``Scope.attribute_held``):

    - CPU (what ``measure`` runs): ``bitsandbytes/autograd/_functions.py`` ``matmul`` routes a
      training-mode ``Linear8bitLt`` (``state.is_training``) on a CPU/XPU tensor to
      ``MatMul8bitFp``, whose ``forward`` sets ``ctx.A = A`` (the input as given) and
      dequantizes the weight into a transient ``CB``.
    - CUDA (the GPU estimate): ``MatMul8bitLt.forward`` sets ``ctx.tensors = (CAt, subA, A)``
      when any of A, B needs grad: ``A`` is the input (reshaped to 2-D, the same storage);
      ``CAt`` is None with a frozen int8 weight (``int8_vectorwise_quant`` fast path, B needs
      no grad); ``subA`` (outlier columns) is None at ``threshold=0.0``, bitsandbytes'
      ``Linear8bitLt`` default (transformers' ``llm_int8_threshold=6.0`` keeps a
      data-dependent T x outliers fp16 slice more: not modelled).

    A Function whose inputs need no grad records no node, so its ctx dies with the forward:
    the input is kept only when it needs grad."""


def _four_bit_keeps() -> None:
    """What a 4-bit (NF4 / FP4) frozen linear keeps, from bitsandbytes 0.50.2, the same on
    CUDA (the GPU estimate) and on the CPU (``measure``): ``Linear4bit.forward`` calls
    ``matmul_4bit``, which runs ``MatMul4Bit.apply`` on every device when the input needs
    grad; ``MatMul4Bit.forward`` (``autograd/_functions.py``) sets ``ctx.tensors = (None, B)``
    -- the packed weight, a parameter, and not the input. (bitsandbytes before 0.43.2 kept
    ``(A, B)``: "fix QLoRA mem bug: delete useless buffered activation", #1270, July 2024; QLoRA
    figures measured with older releases and non-reentrant checkpointing hold each quantized
    linear's input besides.) ``MatMul4Bit.backward`` dequantizes B to the gradient's dtype for
    the input's gradient (counted in the op's gradient bytes). The forward's kernels dequantize
    too -- CUDA ``gemm_4bit`` past 1536 rows (``backends/cuda/ops.py``: ``B_dq =
    torch.empty(shapeB, dtype=A.dtype)``), the CPU default ``_gemm_4bit_default_impl`` always
    -- a transient of one weight in the compute dtype, freed before the next linear runs: not
    modelled (it matters only where a forward moment sets the step's peak)."""


def _quantized_bias_dtype(quant: str, x: Saved) -> DType | None:
    """bitsandbytes casts a quantized linear's bias in place on the first forward, so it is
    stored in that dtype from then on (``bitsandbytes/nn/modules.py``), on every device:

    - ``Linear4bit.forward`` first casts the input to ``compute_dtype``, then ``bias.data =
      bias.data.to(x.dtype)``: the compute dtype, which ``measure`` (and memcalc's model)
      sets to the base weight dtype (None here: the recipe's weight dtype);
    - ``Linear8bitLt.forward``: ``self.bias.data = self.bias.data.to(x.dtype)`` on the input
      as it arrives (fp32 after PEFT's k-bit preparation)."""
    return x.dtype if quant == "int8" else None


def _gemm_dtype(sc: Scope, comp: Component, x: Saved) -> DType:
    """The dtype a linear's GEMM reads: fp8 for the fp8 linears (Transformer Engine
    ``te.Linear``, torchao ``Float8Linear``) -- every block linear, not the LM head, which
    both keep in 16 bits (Megatron-core's output layer is a plain ``ColumnParallelLinear``;
    torchtitan's float8 converter filters ``output``); the autocast dtype under autocast; else
    the input's."""
    if sc.fp8_linears and comp is not Component.output:
        return DType.fp8
    if sc.autocast is not None:
        return sc.autocast
    return x.dtype


def _lora(
    sc: Scope,
    ft: FineTune,
    name: str,
    comp: Component,
    x: Saved,
    tokens: int,
    n_in: int,
    n_out: int,
) -> None:
    """PEFT ``lora.Linear.forward``: ``lora_B(lora_A(dropout(x.to(adapter dtype)))) * scaling``
    added to the base output. The cast is a new tensor per adapter when the dtypes differ;
    ``lora_A`` saves its (dropped-out) input, ``lora_B`` the r-wide intermediate."""
    dtype = ft.adapter_dtype or x.dtype
    kind = PARAM_COMPONENT[comp]
    r = ft.rank
    # the adapter's backward runs first (its nodes are newer): the base output's gradient
    # waits in the base matmul's input buffer meanwhile (autograd input_buffer.cpp)
    pending = tokens * n_out * (sc.autocast or x.dtype).itemsize if x.needs_grad else 0
    inp = x if x.dtype is dtype else Saved(f"{name}.lora_in", x.numel, dtype)
    if inp is not x and x.needs_grad:
        sc.add(
            f"{name}.lora_cast",
            comp,
            [],
            0,
            "aten._to_copy (x.to(lora_A.weight.dtype)): saves nothing; its backward casts the "
            "input's gradient back beside the adapter-dtype one",
            grads=x.numel * (dtype.itemsize + x.dtype.itemsize) + pending,
        )
    if ft.dropout > 0:
        # F.dropout of a tensor that needs no grad (the first layer's, without input grads)
        # records nothing: no mask is saved
        mask = [Saved(f"{name}.lora_dropout.mask", inp.numel, DType.bool)] if x.needs_grad else []
        sc.add(
            f"{name}.lora_dropout",
            comp,
            mask,
            2 * inp.numel,
            "aten.native_dropout (lora_dropout): saves the bool mask",
            grads=2 * inp.nbytes + pending,
        )
        inp = Saved(f"{name}.lora_dropout.out", inp.numel, dtype)
    # under torch.autocast lora_A / lora_B are lower-precision linears too (autocast_mode.cpp):
    # each saves a 16-bit cast of an fp32 input and the cached 16-bit cast of its weight
    # (cached: a leaf that requires grad), and returns 16 bits
    cast = sc.autocast
    a_saves = [sc.matmul_input(inp, f"{name}.lora_A")]
    b_saves = [Saved(f"{name}.lora_A.out", tokens * r, cast or dtype)]
    if cast is not None:
        a_saves.append(Saved(f"{name}.lora_A.{WEIGHT_CAST}", r * n_in, cast))
        b_saves.append(Saved(f"{name}.lora_B.{WEIGHT_CAST}", n_out * r, cast))
    sc.add(
        f"{name}.lora_A",
        comp,
        a_saves,
        matmul_flops(tokens, n_in, r),
        "peft lora_A (nn.Linear): saves its input",
        grads=tokens * (n_in + r) * dtype.itemsize + pending,
        params=r * n_in,
        weights=(ParamTensor(f"{name}.lora_A.weight", (r, n_in), kind, True, dtype),),
        work=Gemm(tokens, n_in, r, dtype, 1, x.needs_grad, True),
    )
    sc.add(
        f"{name}.lora_B",
        comp,
        b_saves,
        matmul_flops(tokens, r, n_out),
        "peft lora_B (nn.Linear): saves the r-wide lora_A output",
        grads=tokens * (r + n_out) * dtype.itemsize + pending,
        params=r * n_out,
        weights=(ParamTensor(f"{name}.lora_B.weight", (n_out, r), kind, True, dtype),),
        work=Gemm(tokens, r, n_out, dtype),
    )
