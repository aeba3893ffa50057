"""What every building block shares: the scope collecting its ops, the sizes of the step it is
lowered for, and the smallest helpers (a tensor, a dropout, matmul FLOPs).

Notation: b batch, s sequence, T = b*s tokens, h hidden, a heads, g kv heads, d head dim, m MLP
width, V vocabulary, p the activation dtype, r the residual-stream dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memcalc.graph.ops import AttentionWork, Component, Gemm, Op, ParamTensor, Saved
from memcalc.spec.training import DType


@dataclass(frozen=True)
class FineTune:
    """What a frozen-base fine-tuning trains, as the building blocks need it."""

    adapted: frozenset[str] | None
    """Leaf names of the linears with LoRA adapters; None: every linear but the LM head."""
    rank: int
    dropout: float
    adapter_dtype: DType | None
    """The adapters' dtype (None: the base weight dtype)."""
    trained: frozenset[str]
    """Leaf names of modules trained in full (PEFT modules_to_save, embeddings)."""
    quantize: str
    """How frozen base linears are stored (a ``Quantize`` value; "none")."""
    upcast: bool
    """Non-quantized parameters are fp32 (PEFT prepare_model_for_kbit_training)."""
    copied: frozenset[str] = frozenset()
    """Leaf names of the PEFT ``modules_to_save``: trained as a copy beside the frozen original
    (``peft/utils/other.py`` ``ModulesToSaveWrapper.update``: ``copy.deepcopy(
    self.original_module)``, then ``self.original_module.requires_grad_(False)``)."""
    excluded: frozenset[str] = frozenset()
    """Leaf names PEFT's MoE conversion moves to parameters (never adapted as modules)."""
    not_linear: frozenset[str] = frozenset()
    """Leaf names of the modules the blocks lower as linears that are no ``nn.Linear`` in
    the model code (transformers 5's MoE routers): PEFT does not adapt them as modules and
    bitsandbytes does not quantize them."""
    wrapped: tuple[tuple[str, int], ...] = ()
    """Parameters adapted by PEFT ``lora.ParamWrapper``, by key suffix (``gate_up_proj``,
    ``gate.weight``), with their rank multiplier (2: a fused pair, ``rank_pattern``)."""

    @staticmethod
    def leaf(name: str) -> str:
        return name.rsplit(".", 1)[-1]

    def trains(self, name: str) -> bool:
        return self.leaf(name) in self.trained

    def keeps_original(self, name: str) -> bool:
        """A frozen original of module ``name`` stays beside its trained copy."""
        return self.leaf(name) in self.copied

    def adapts(self, name: str) -> bool:
        leaf = self.leaf(name)
        if leaf == "lm_head" or self.trains(name) or leaf in self.excluded | self.not_linear:
            return False
        return self.adapted is None or leaf in self.adapted

    def quantized(self, name: str) -> str | None:
        """How the frozen base weight of linear ``name`` is stored: the ``Quantize`` value, or
        None (not quantized). bitsandbytes replaces only ``nn.Linear`` modules (transformers
        ``integrations/bitsandbytes.py`` ``replace_with_bnb_linear``), so a router that is a
        module of its own (``not_linear``) keeps its weight; the LM head is never passed here."""
        if self.quantize == "none" or self.leaf(name) in self.not_linear:
            return None
        return self.quantize

    def wrap_rank(self, key: str) -> int:
        """The LoRA rank of ``lora.ParamWrapper`` on parameter ``key`` (its name ending in a
        wrapped suffix, as ``BaseTuner._inject_parameters`` matches); 0: not wrapped."""
        for suffix, times in self.wrapped:
            if key == suffix or key.endswith(f".{suffix}"):
                return self.rank * times
        return 0


@dataclass
class Scope:
    """Collects the ops of one scope (prologue, a block kind, epilogue)."""

    fp8_linears: bool = False
    autocast: DType | None = None
    """Under torch.autocast: the 16-bit dtype matmuls cast their inputs and weights to."""
    gathered_inputs: bool = False
    """DTensor sequence parallelism (``ParallelImpl.torch``): a column-parallel linear saves the
    all-gathered input (``PrepareModuleInput`` gathers it before the projections), not the
    rank's sequence shard."""
    router_weight_fp32: bool = False
    """The router's weight stays fp32 in a 16-bit model (``Implementation.router_weight_fp32``
    under an engine that keeps loaded dtypes)."""
    ops: list[Op] = field(default_factory=list)
    shared: dict[str, Saved] = field(default_factory=dict)
    """Tensors the block's ops save but the model makes once for every layer (a sliding-window
    mask): counted once, in the prologue, not per layer."""
    finetune: FineTune | None = None
    """Frozen-base fine-tuning (LoRA): None trains every parameter."""
    linears: set[str] = field(default_factory=set)
    """Leaf names of the linears lowered here (to check LoRA targets against)."""
    attribute_held: dict[str, Saved] = field(default_factory=dict)
    """Inputs an autograd Function keeps as ctx attributes rather than saved tensors
    (bitsandbytes' int8 matmuls, ``linear._int8_keeps``): held until its backward even inside a
    checkpoint, which only replaces saved tensors."""

    def trainable(self, name: str) -> bool:
        """The parameter of op ``name`` has a gradient."""
        return self.finetune is None or self.finetune.trains(name)

    def param_dtype(self, name: str) -> DType | None:
        """Storage dtype of a non-quantized parameter when not the recipe's (k-bit upcast)."""
        return DType.fp32 if self.finetune is not None and self.finetune.upcast else None

    def frozen_originals(
        self, name: str, weights: tuple[ParamTensor, ...]
    ) -> tuple[ParamTensor, ...]:
        """The frozen originals PEFT keeps of a ``modules_to_save`` module's ``weights``
        (``FineTune.copied``): the same tensors again, without gradients; none otherwise."""
        if self.finetune is None or not self.finetune.keeps_original(name):
            return ()
        return tuple(
            ParamTensor(f"{w.name}.original", w.shape, w.component, False, w.dtype, w.quant)
            for w in weights
        )

    def share(self, t: Saved) -> None:
        """Record ``t`` as saved here but shared by all layers."""
        self.shared.setdefault(t.name, t)

    def matmul_input(self, x: Saved, op: str, role: str = "") -> Saved:
        """What a matmul saves of its activation input: ``x`` itself, or under autocast a
        16-bit cast of an fp32 ``x`` -- made by each matmul anew (autocast caches only casts
        of leaf tensors, the weights), so three projections of one input save three copies;
        ``role`` tells apart the casts of one op's arguments that are views of one storage
        (q, k and v of a fused projection: three casts)."""
        if self.autocast is None or x.dtype is self.autocast:
            return x
        name = f"{op}.{x.name}" + (f".{role}" if role else "")
        return Saved(f"{name}.cast", x.view_numel or x.numel, self.autocast)

    def add(
        self,
        name: str,
        component: Component,
        saves: list[Saved],
        flops: int,
        source: str,
        core: bool = False,
        grads: int = 0,
        params: int = 0,
        weights: tuple[ParamTensor, ...] = (),
        work: Gemm | AttentionWork | None = None,
        kernel: str = "",
        outputs: tuple[Saved, ...] = (),
        scratch: tuple[int, int] = (0, 0),
    ) -> None:
        """Append an op; ``grads`` = bytes of its output gradient + its input gradients,
        ``params`` = elements of the weights whose gradients its backward writes, ``weights``
        = the parameter tensors it owns, ``work`` = the matmul or attention kernel it runs,
        ``kernel`` / ``outputs`` what a save-list policy reads (``Op.kernel``, ``Op.outputs``),
        ``scratch`` its (forward, backward) transients (``Op.forward_scratch``, ...)."""
        self.ops.append(
            Op(
                name,
                component,
                tuple(saves),
                flops,
                source,
                core,
                grads,
                params,
                weights,
                work=work,
                kernel=kernel,
                outputs=outputs,
                forward_scratch=scratch[0],
                backward_scratch=scratch[1],
            )
        )


@dataclass(frozen=True)
class Dims:
    """The sizes one step is lowered for (per GPU rank)."""

    b: int
    s: int
    h: int
    a: int
    """Query heads."""
    d: int
    """Per-head width."""
    g: int
    """Key/value heads."""
    m: int
    V: int
    p: DType
    """Activation dtype: what matmuls output."""
    r: DType
    """Residual-stream dtype: p, or fp32 under autocast (fp32 weights, fp32 embeddings)."""
    stat_dtype: DType
    """LayerNorm statistics: fp32 on CUDA (and for fp32 inputs), the input dtype on CPU."""
    pow_in_fp32: bool = False
    cp: int = 1
    """Context-parallel ranks (``s`` is already this rank's seq / cp tokens)."""
    cp_rotate: str | None = None
    """torch ``context_parallel``'s rotate method when the framework's CP is torch's (its
    ring buffers are counted as the attention kernel's scratch); None: not counted."""
    """CUDA autocast runs pow in fp32 (HF gelu_new)."""
    tp: int = 1
    """Tensor-parallel ranks (Megatron column -> row layout): heads, MLP width and vocabulary
    above are this rank's share."""
    sp: bool = False
    """Sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2): outside the column -> row
    regions (norms, dropout, the residual stream) each rank holds T / tp tokens."""
    experts: int = 0
    """Routed experts whose weights this rank holds (E / ep)."""
    ep: int = 1
    """Expert-parallel ranks: the tokens of ep ranks meet at each rank's experts."""
    etp: int = 1
    """Expert tensor-parallel ranks (Megatron's etp; tp elsewhere)."""
    expert_m: int = 0
    """One routed expert's MLP width on this rank (moe_intermediate_size / tp)."""
    shared_m: int = 0
    """The shared experts' MLP width on this rank."""
    moe_imbalance: float = 1.0
    """Busiest expert's tokens over its fair share (``TrainingSetup.moe_imbalance``)."""
    capacity_factor: float | None = None
    """Expert capacity over the fair share; None: dropless routing."""
    cpu: bool = False
    """Lowered for CPU kernels where they save differently (comparisons with CPU runs)."""
    cpu_dropout_sdpa: bool = False
    """CPU SDPA with dropout as the math kernel the CPU runs (``device='cpu'``); off for the
    kernels ``memcalc trace`` runs (``device='traced'``: that one as flash, as on a GPU)."""

    @property
    def T(self) -> int:  # noqa: N802 -- T is the paper's name for tokens
        """Tokens inside a tensor-parallel region (all of this rank's sequence)."""
        return self.b * self.s

    @property
    def T_rep(self) -> int:  # noqa: N802
        """Tokens of a tensor outside the tensor-parallel regions: replicated under TP alone,
        split over the tp ranks with sequence parallelism."""
        return self.T // self.tp if self.sp and self.tp > 1 else self.T

    @property
    def q(self) -> int:
        """Width of the query projection, a*d."""
        return self.a * self.d

    @property
    def kv(self) -> int:
        """Width of the key (and value) projection, g*d."""
        return self.g * self.d


def tensor(name: str, rows: int, cols: int, dtype: DType) -> Saved:
    """A (rows x cols) tensor."""
    return Saved(name, rows * cols, dtype)


def unique(saved: list[Saved]) -> list[Saved]:
    """``saved`` without repeated storages (q, k, v of a fused projection are one storage)."""
    out: dict[str, Saved] = {}
    for t in saved:
        out.setdefault(t.name, t)
    return list(out.values())


def matmul_flops(m: int, k: int, n: int) -> int:
    """2*m*k*n: one multiply and one add per term (Kaplan et al. 2020, sec. 2.1)."""
    return 2 * m * k * n


def dropout(
    sc: Scope,
    name: str,
    comp: Component,
    x: Saved,
    p: float,
    *,
    core: bool = False,
    keep_output_name: str | None = None,
) -> Saved:
    """``aten.native_dropout`` (CUDA): saves a 1-byte bool mask; the output is a new tensor.

    With p == 0, ``F.dropout`` returns its input: no mask, no copy.
    """
    if p <= 0:
        return x
    if not x.needs_grad:
        # F.dropout of a tensor that needs no grad records no node: no mask is saved
        sc.add(name, comp, [], 2 * x.numel, "aten.native_dropout (no grad): saves nothing", core)
        return Saved(keep_output_name or f"{name}.out", x.numel, x.dtype, needs_grad=False)
    sc.add(
        name,
        comp,
        [Saved(f"{name}.mask", x.numel, DType.bool)],
        2 * x.numel,
        "aten.native_dropout: saves the bool mask",
        core,
        grads=2 * x.nbytes,
    )
    return Saved(keep_output_name or f"{name}.out", x.numel, x.dtype)
