"""Linear layers (``nn.Linear``, HF ``Conv1D``) under every precision recipe."""

from __future__ import annotations

from memcalc.graph.ops import Component, ParamTensor, Saved
from memcalc.graph.scope import Scope, matmul_flops, tensor
from memcalc.spec.training import DType

WEIGHT_CAST = "weight_cast"
"""Name suffix of an autocast weight copy (counted by ``Block.weight_cast_bytes``)."""

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
    """
    out_tokens = tokens if out_tokens is None else out_tokens
    if sc.gathered_inputs and x.numel < tokens * n_in:
        x = Saved(f"{x.name}.all_gathered", tokens * n_in, x.dtype)
    if sc.fp8_linears:
        saved = [Saved(f"{x.name}.fp8", x.numel, DType.fp8)]
    else:
        saved = [sc.matmul_input(x, name)]
    if sc.autocast is not None:
        saved.append(Saved(f"{name}.{WEIGHT_CAST}", n_in * n_out, sc.autocast))
    weights: tuple[ParamTensor, ...] = ()
    if owns_weight:
        weights = (ParamTensor(f"{name}.weight", (n_out, n_in), PARAM_COMPONENT[comp]),)
        if bias:
            weights += (ParamTensor(f"{name}.bias", (n_out,), PARAM_COMPONENT[comp]),)
    sc.add(
        name,
        comp,
        saved,
        matmul_flops(tokens, n_in, n_out),
        "aten.addmm/mm: saves mat1 (input) and mat2 (weight, a parameter)",
        grads=(tokens * n_in + out_tokens * n_out) * out_dtype.itemsize,
        params=n_in * n_out,
        weights=weights,
    )
    return tensor(f"{name}.out", out_tokens, n_out, out_dtype)
