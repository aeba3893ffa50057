"""The estimates the generated questions read, for one model, setup and GPU.

Every number a generated question shows comes from ``memcalc.estimate.estimate`` (and
``memcalc.plan`` for the candidates); each estimate is computed the first time a question
kind asks for it, so a sibling question for a varied setup costs only what it reads.

Besides the learner's own setup, some questions ask "what if": the same model with LoRA
adapters (the learner's own LoRA when they gave one), quantized (QLoRA), or laid out over
several GPUs (tensor, pipeline, context parallelism, ZeRO). ``under`` estimates such a
variant and returns None when the estimate refuses it (tp not dividing the heads, a LoRA
target the family lacks): the question is then left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from memcalc.errors import MemcalcError
from memcalc.estimate import DEFAULT_MFU, Breakdown, Options, estimate
from memcalc.graph.lower import lower_cached
from memcalc.graph.ops import OpGraph, ParamTensor
from memcalc.profiles import GpuProfile
from memcalc.spec.compat import framework_fallback
from memcalc.spec.families import family_of
from memcalc.spec.finetune import ALL_LINEAR, LoraSpec, Quantize
from memcalc.spec.model import ModelSpec
from memcalc.spec.parallel import Parallelism
from memcalc.spec.training import TrainingSetup
from memcalc.strategies.recompute import Recompute, sqrt_k
from memcalc.strategies.selection import default_strategies

LORA_RANK = 16
"""The rank the LoRA questions ask about when the learner gave none (``--lora-rank``)."""
TP_DEGREES = (8, 4, 2)
"""Tensor-parallel sizes a question tries, largest first (8: one NVLink node); the first the
model's heads divide is asked about."""
DP_RANKS = 8
"""Data-parallel GPUs the ZeRO question spreads the model states over (one node)."""
NO_STRATEGY = Options()
"""No recompute, no offload: the strategy a "what if" variant is estimated with by default."""


@dataclass(frozen=True)
class WeightParts:
    """The weights of one setup by how they are stored: bytes on the device, from the
    parameter tensors the estimate's op graph owns (each block kind times its count)."""

    quantized_numel: int
    """Elements of the frozen base weights stored quantized (bitsandbytes)."""
    quantized_bytes: int
    """Their storage (``Quantize.storage_bytes``: codes, absmax, code table)."""
    quantized_tensors: int
    """How many quantized tensors there are (each has its own code table)."""
    quantized_shapes: tuple[tuple[int, int, int], ...]
    """(elements, rows, how many) of each quantized tensor kind: its storage under another
    ``Quantize`` is ``sum(count * q.storage_bytes(numel, rows))``."""
    trained_numel: int
    """Elements with a gradient (LoRA: the adapters, and modules trained in full)."""
    trained_bytes: int
    frozen_bytes: int
    """Bytes of the frozen, unquantized tensors (embeddings, norms, LM head under QLoRA, and
    a mixture of experts' routed experts)."""
    routed_numel: int
    """Elements of the routed experts' weights (MoE; 0 for a dense model)."""
    routed_active_numel: int
    """The part of them one token uses (top_k of the E experts)."""
    adapter: tuple[str, int, int] | None = None
    """One adapted linear: its name, n_in and n_out (None without LoRA)."""
    frozen_routed_numel: int = 0
    """Elements of the routed experts among the frozen, unquantized tensors: HF keeps them as
    fused ``nn.Parameter`` s (not ``nn.Linear``), which bitsandbytes does not quantize and
    PEFT's LoRA leaves frozen unless a target names them (``graph/blocks/moe.py``)."""
    frozen_routed_bytes: int = 0
    frozen_kinds: tuple[str, ...] = ()
    """What the other frozen, unquantized tensors are, in this order where present:
    ``embeddings``, ``norms``, ``lm_head``, ``biases``, ``routers``."""
    lora_a_numel: int = 0
    """Elements of the LoRA A matrices (r x n_in each) alone."""

    @property
    def total_bytes(self) -> int:
        return self.quantized_bytes + self.trained_bytes + self.frozen_bytes

    def stored_as(self, quantize: Quantize) -> int:
        """Bytes of the quantized tensors under another storage."""
        return sum(
            n * quantize.storage_bytes(numel, rows) for numel, rows, n in self.quantized_shapes
        )


def _tensors(graph: OpGraph) -> list[tuple[ParamTensor, int]]:
    """Every parameter tensor of the graph with the number of times it exists."""
    out = [(w, 1) for op in graph.prologue + graph.epilogue for w in op.weights]
    for blk, count in zip(graph.kinds, graph.kind_counts, strict=True):
        out += [(w, count) for op in blk.ops for w in op.weights]
    return out


def weight_parts(spec: ModelSpec, setup: TrainingSetup) -> WeightParts:
    """The weights of ``spec`` under ``setup``, split by storage.

    >>> from memcalc.spec.presets import preset
    >>> qlora = TrainingSetup(lora=LoraSpec(rank=16), quantize=Quantize.nf4)
    >>> parts = weight_parts(preset("llama-2-7b"), qlora)
    >>> parts.trained_numel, parts.quantized_tensors
    (8388608, 224)
    """
    graph = lower_cached(spec, setup.replace(dropout=None))
    itemsize = setup.weight_dtype.itemsize
    quantized = [0, 0, 0]
    shapes: list[tuple[int, int, int]] = []
    adapter = None
    trained, trained_bytes, frozen_bytes, routed, routed_active = 0, 0, 0, 0, 0
    frozen_routed, frozen_routed_bytes, lora_a = 0, 0, 0
    kinds: set[str] = set()
    tensors = _tensors(graph)
    by_name = {w.name: w for w, _ in tensors}
    for w, count in tensors:
        stored = w.storage_bytes(itemsize) * count
        lora_b = by_name.get(w.name.replace(".lora_A.", ".lora_B."))
        if adapter is None and ".lora_A." in w.name and lora_b is not None:
            leaf = w.name.removesuffix(".lora_A.weight").rsplit(".", 1)[-1]
            adapter = (leaf, w.shape[1], lora_b.shape[0])
        if w.quant is not None:
            quantized[0] += w.numel * count
            quantized[1] += stored
            quantized[2] += count
            shapes.append((w.numel, w.shape[0], count))
        elif w.trainable:
            trained += w.numel * count
            trained_bytes += stored
            if ".lora_A." in w.name:
                lora_a += w.numel * count
        else:
            frozen_bytes += stored
            if w.active_numel is not None:
                frozen_routed += w.numel * count
                frozen_routed_bytes += stored
            else:
                kinds.add(_frozen_kind(w))
        if w.active_numel is not None:
            routed += w.numel * count
            routed_active += w.active_numel * count
    return WeightParts(
        quantized_numel=quantized[0],
        quantized_bytes=quantized[1],
        quantized_tensors=quantized[2],
        quantized_shapes=tuple(shapes),
        trained_numel=trained,
        trained_bytes=trained_bytes,
        frozen_bytes=frozen_bytes,
        routed_numel=routed,
        routed_active_numel=routed_active,
        adapter=adapter,
        frozen_routed_numel=frozen_routed,
        frozen_routed_bytes=frozen_routed_bytes,
        frozen_kinds=tuple(k for k in FROZEN_KINDS if k in kinds),
        lora_a_numel=lora_a,
    )


FROZEN_KINDS = ("embeddings", "norms", "lm_head", "biases", "routers")
"""What a frozen, unquantized tensor that is not a routed expert can be, in the order a
sentence lists them."""


def _frozen_kind(w: ParamTensor) -> str:
    """Which of ``FROZEN_KINDS`` a frozen, unquantized tensor is (by its component; a
    non-bias weight of a block that bitsandbytes left alone is a router's)."""
    named = {"embedding": "embeddings", "norms": "norms", "head": "lm_head"}
    if w.component in named:
        return named[w.component]
    return "biases" if w.name.endswith(".bias") else "routers"


@dataclass(frozen=True)
class ModelFacts:
    """One model, setup and GPU, and the Breakdowns of the strategies the questions need."""

    spec: ModelSpec
    setup: TrainingSetup
    gpu: GpuProfile
    mfu: float = DEFAULT_MFU
    """Model-FLOPs utilisation for every time shown (``--mfu``)."""
    _every: dict[int, Breakdown] = field(default_factory=dict, compare=False, repr=False)
    _variants: dict[tuple[TrainingSetup, Options], Breakdown | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def run(self, options: Options) -> Breakdown:
        """The estimate of one strategy at this ``mfu``."""
        return estimate(self.spec, self.setup, self.gpu, replace(options, mfu=self.mfu))

    def under(self, setup: TrainingSetup, options: Options = NO_STRATEGY) -> Breakdown | None:
        """The estimate of this model under another setup, or None when the estimate refuses
        it (the question that wanted it is left out). A layout whose default framework
        (Megatron-core, with tp / pp) cannot build the model runs HF's code, as
        ``memcalc estimate`` does (``spec.compat.framework_fallback``)."""
        if setup == self.setup and options == NO_STRATEGY:
            return self.base
        fallback = framework_fallback(self.spec, setup)
        if fallback is not None:
            setup = setup.replace(framework=fallback.value)
        key = (setup, options)
        if key not in self._variants:
            try:
                b = estimate(self.spec, setup, self.gpu, replace(options, mfu=self.mfu))
            except MemcalcError:
                b = None
            self._variants[key] = b
        return self._variants[key]

    @cached_property
    def base(self) -> Breakdown:
        """No recompute, no offload."""
        return self.run(Options())

    @cached_property
    def full(self) -> Breakdown:
        """Full recompute (every block keeps only its input)."""
        return self.run(Options(recompute=Recompute.full))

    @property
    def k(self) -> int:
        """Segment length of sqrt(N) checkpointing."""
        return sqrt_k(self.spec.num_layers)

    @cached_property
    def sqrt(self) -> Breakdown:
        """Checkpoint every k = sqrt_k(N) blocks."""
        return self.every(self.k)

    def every(self, k: int) -> Breakdown:
        """Checkpoint every ``k`` blocks."""
        if k not in self._every:
            self._every[k] = self.run(Options(recompute=Recompute.every_k, every=k))
        return self._every[k]

    @cached_property
    def strategies(self) -> tuple[Breakdown, ...]:
        """The rows of ``memcalc estimate``'s strategy table for this setup
        (``default_strategies``), no strategy first: the cheapest of them that fits is the
        strategy its verdict line names. A row the estimate refuses for this GPU (optimizer
        offload to NVMe on a profile without local NVMe) is left out, as it cannot be chosen."""
        out = []
        for options in default_strategies(self.spec.num_layers, self.setup):
            try:
                out.append(self.run(options))
            except MemcalcError:
                continue
        return tuple(out)

    # --- fine-tuning: full, LoRA, QLoRA ---------------------------------------------------

    @property
    def fine_tuned(self) -> bool:
        """The learner's own setup trains LoRA adapters on a frozen base."""
        return self.setup.lora is not None

    @cached_property
    def full_setup(self) -> TrainingSetup:
        """The learner's setup as full fine-tuning (every weight trained, none quantized)."""
        if not self.fine_tuned:
            return self.setup
        return self.setup.replace(
            lora=None, quantize=Quantize.none, kbit_prep=None, input_grads=None
        )

    @cached_property
    def full_tuning(self) -> Breakdown | None:
        """Full fine-tuning of the same model and batch."""
        return self.under(self.full_setup)

    @cached_property
    def lora_setup(self) -> TrainingSetup | None:
        """The learner's LoRA setup; without one, LoRA r = ``LORA_RANK`` on PEFT's default
        targets for the family; where PEFT refuses its default (a mixture of experts under
        transformers 5, ``spec/peft_lora.py``), the family's mapped targets named, as PEFT's
        error asks; every linear when the family has none this model matches; None when the
        estimate refuses all three. (Named attention targets leave a mixture of experts'
        routed experts frozen, as PEFT leaves their fused weights.)
        """
        if self.fine_tuned:
            return self.setup
        mapped = tuple(family_of(self.spec).impl.lora_targets or ())
        for targets in dict.fromkeys(((), mapped, (ALL_LINEAR,))):
            setup = self.setup.replace(lora=LoraSpec(rank=LORA_RANK, targets=targets))
            if self.under(setup) is not None:
                return setup
        return None

    @cached_property
    def lora(self) -> Breakdown | None:
        """The estimate of ``lora_setup``."""
        return None if self.lora_setup is None else self.under(self.lora_setup)

    @cached_property
    def qlora_setup(self) -> TrainingSetup | None:
        """``lora_setup`` with a quantized base: the learner's quantization, else NF4."""
        lora = self.lora_setup
        if lora is None or lora.quantize is not Quantize.none:
            return lora
        return lora.replace(quantize=Quantize.nf4)

    @cached_property
    def qlora(self) -> Breakdown | None:
        return None if self.qlora_setup is None else self.under(self.qlora_setup)

    def weights(self, setup: TrainingSetup) -> WeightParts:
        """The weights of this model under ``setup``, split by storage."""
        return weight_parts(self.spec, setup)

    @cached_property
    def experts(self) -> WeightParts | None:
        """The weights split by storage, routed experts counted (None: a dense model)."""
        if self.spec.moe is None:
            return None
        return weight_parts(self.spec, self.setup)

    # --- several GPUs ---------------------------------------------------------------------

    def laid_out(self, options: Options = NO_STRATEGY, **layout: int | bool) -> Breakdown | None:
        """The learner's setup over several GPUs (``Parallelism`` fields), or None."""
        try:
            setup = self.setup.replace(parallel=Parallelism(**layout))  # type: ignore[arg-type]
        except MemcalcError:
            return None
        return self.under(setup, options)

    @cached_property
    def tp_degree(self) -> int | None:
        """The largest of ``TP_DEGREES`` this model's layout accepts (heads divisible)."""
        for t in TP_DEGREES:
            if self.laid_out(tp=t) is not None and self.laid_out(tp=t, sp=False) is not None:
                return t
        return None


def model_facts(
    spec: ModelSpec, setup: TrainingSetup, gpu: GpuProfile, mfu: float = DEFAULT_MFU
) -> ModelFacts:
    """The facts of one model, setup and GPU (estimates run when first read)."""
    return ModelFacts(spec=spec, setup=setup, gpu=gpu, mfu=mfu)
