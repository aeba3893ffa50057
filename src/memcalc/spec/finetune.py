"""Fine-tuning with a frozen base: LoRA adapters (Hu et al. 2021, as PEFT builds them) and
quantized base weights (QLoRA, Dettmers et al. 2023; LLM.int8, Dettmers et al. 2022, as
bitsandbytes stores them).

What memory each choice changes, and where it comes from:

- A frozen parameter has no gradient and no optimizer state. A frozen linear saves nothing for
  backward (``mm``'s backward needs its input only for the weight's gradient); a frozen norm or
  embedding likewise skips what only its weight's gradient needs.
- A LoRA adapter on a linear (``peft/tuners/lora/layer.py`` ``Linear.forward``) adds
  ``lora_B(lora_A(dropout(x))) * scaling``: r x (n_in + n_out) parameters in the adapter dtype
  (fp32 with PEFT's default ``autocast_adapter_dtype=True``), trainable. It casts its input
  to that dtype (``_cast_input_dtype``: a copy per adapter when the dtypes differ), ``lora_A``
  saves that (or the dropout output, with the dropout's mask), ``lora_B`` saves the r-wide
  intermediate.
- bitsandbytes storage per quantized weight of n elements (measured on bitsandbytes 0.50):
  NF4/FP4 in blocks of 64: n / 2 bytes + an fp32 absmax per block (4 n / 64) + its 16-entry
  fp32 code (64 bytes); NF4 with double quantization: the absmax as uint8 (n / 64) + an fp32
  absmax per 256 of them + a 256-entry fp32 code (1 KiB) + an fp32 offset; int8
  (``Linear8bitLt``, no fp16 weights): n bytes + an fp32 scale per output row (SCB). The
  LM head and the embeddings stay unquantized (transformers' bitsandbytes integration skips
  them).
- PEFT ``prepare_model_for_kbit_training`` (``peft/utils/other.py``): casts every non-4-bit
  fp16/bf16 parameter to fp32 (norms, embeddings, LM head), turns on gradient checkpointing
  and makes the embedding output require grad (``enable_input_require_grads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memcalc.validate import FieldError, check, spec_field


class Quantize(str, Enum):
    """How the frozen base's linear weights are stored."""

    none = "none"
    int8 = "int8"
    """LLM.int8 (bitsandbytes Linear8bitLt): 1 byte + an fp32 scale per output row."""
    nf4 = "nf4"
    """4-bit NormalFloat in blocks of 64, fp32 absmax per block (QLoRA)."""
    nf4_dq = "nf4-dq"
    """NF4 with double quantization: the absmax quantized to 8 bits in blocks of 256."""
    fp4 = "fp4"
    """4-bit float in blocks of 64, fp32 absmax per block."""

    def storage_bytes(self, numel: int, rows: int) -> int:
        """Bytes bitsandbytes allocates for one weight of ``numel`` elements, ``rows`` output
        rows.

        >>> n = 256 * 512
        >>> Quantize.nf4.storage_bytes(n, 256), Quantize.nf4_dq.storage_bytes(n, 256)
        (73792, 68708)
        """
        blocks = -(-numel // 64)
        if self is Quantize.int8:
            return numel + 4 * rows
        if self in (Quantize.nf4, Quantize.fp4):
            return -(-numel // 2) + 4 * blocks + 64
        if self is Quantize.nf4_dq:
            return -(-numel // 2) + blocks + 64 + 4 * -(-blocks // 256) + 1024 + 4
        raise ValueError(self)


class AdapterDtype(str, Enum):
    """The dtype of the LoRA adapters."""

    fp32 = "fp32"
    """PEFT's default (``autocast_adapter_dtype=True``: fp16/bf16 adapters become fp32)."""
    weight = "weight"
    """The base model's weight dtype (``autocast_adapter_dtype=False``)."""


ALL_LINEAR = "all-linear"
"""PEFT's target shorthand: every linear layer but the output head."""


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters on the base model's linear layers (PEFT ``LoraConfig``)."""

    rank: int = spec_field("Adapter rank r.", ge=1, le=65536)
    alpha: float = spec_field(
        "Scaling numerator (lora_alpha): no effect on memory, accepted for parity with PEFT.",
        default=16.0,
        gt=0,
        le=1e6,
    )
    targets: tuple[str, ...] = spec_field(
        "Module names to adapt (q_proj, v_proj, ... or all-linear); empty: PEFT's default for "
        "the family.",
        default=(),
    )
    dropout: float = spec_field(
        "Dropout on the adapter input (lora_dropout).", default=0.0, ge=0.0, lt=1.0
    )
    adapter_dtype: AdapterDtype = spec_field("Adapter dtype.", default=AdapterDtype.fp32)
    train_embeddings: bool = spec_field(
        "Train the token embedding (and an untied LM head) in full.", default=False
    )
    modules_to_save: tuple[str, ...] = spec_field(
        "Other modules trained in full (PEFT modules_to_save), by name (e.g. lm_head).",
        default=(),
    )

    def __post_init__(self) -> None:
        check(self)

    def _check(self) -> None:
        if ALL_LINEAR in self.targets and len(self.targets) > 1:
            raise FieldError("targets", f"{ALL_LINEAR} stands alone")
