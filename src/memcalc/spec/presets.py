"""Built-in model presets, with the sizes of the published checkpoints' config.json files.

Each preset's parameter count is pinned as an exact integer in tests/test_params.py and checked
against the Hugging Face implementation built on the meta device.
"""

from __future__ import annotations

from memcalc.errors import MemcalcError, one_of
from memcalc.spec.model import Family, LayerType, ModelSpec

GPT2_DROPOUT = 0.1
"""openai-community/gpt2*: embd_pdrop = attn_pdrop = resid_pdrop = 0.1."""


def _gpt2(name: str, hidden: int, layers: int, heads: int) -> ModelSpec:
    # openai-community/gpt2*: vocab 50257, n_positions 1024, gelu_new, all dropouts 0.1.
    return ModelSpec(
        name=name,
        family=Family.gpt2,
        vocab_size=50257,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        max_position_embeddings=1024,
        embedding_dropout=GPT2_DROPOUT,
        attention_dropout=GPT2_DROPOUT,
        residual_dropout=GPT2_DROPOUT,
    )


def _llama(
    name: str,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    *,
    family: Family = Family.llama,
    tied: bool = False,
    qkv_bias: bool = False,
    max_positions: int = 4096,
    sliding_window: int | None = None,
) -> ModelSpec:
    return ModelSpec(
        sliding_window=sliding_window,
        layer_pattern=(LayerType.sliding if sliding_window else LayerType.full,),
        name=name,
        family=family,
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        intermediate_size=intermediate,
        tie_embeddings=tied,
        qkv_bias=qkv_bias,
        max_position_embeddings=max_positions,
    )


def _family_presets() -> tuple[ModelSpec, ...]:
    """The presets defined by the family modules (``spec/families/*.py``: ``PRESETS``)."""
    from memcalc.spec.families import family_modules

    return tuple(spec for m in family_modules() for spec in getattr(m, "PRESETS", ()))


PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _gpt2("gpt2", 768, 12, 12),
        _gpt2("gpt2-medium", 1024, 24, 16),
        _gpt2("gpt2-large", 1280, 36, 20),
        _gpt2("gpt2-xl", 1600, 48, 25),
        _llama("tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, max_positions=2048),
        _llama("llama-3.2-1b", 128256, 2048, 16, 32, 8, 8192, tied=True, max_positions=131072),
        _llama("llama-2-7b", 32000, 4096, 32, 32, 32, 11008),
        _llama("llama-2-13b", 32000, 5120, 40, 40, 40, 13824),
        _llama("llama-2-70b", 32000, 8192, 80, 64, 8, 28672),
        _llama("llama-3-8b", 128256, 4096, 32, 32, 8, 14336, max_positions=8192),
        _llama("llama-3-70b", 128256, 8192, 80, 64, 8, 28672, max_positions=8192),
        # Llama 3.1 / 3.2 / 3.3 (meta-llama/Llama-3.*): 131072 positions through rope_scaling
        # rope_type "llama3" (factor 8 over 8192), which changes the inverse frequencies only:
        # no parameter and no saved tensor, so it is read from config.json and not modelled
        _llama("llama-3.1-8b", 128256, 4096, 32, 32, 8, 14336, max_positions=131072),
        _llama("llama-3.1-70b", 128256, 8192, 80, 64, 8, 28672, max_positions=131072),
        _llama("llama-3.1-405b", 128256, 16384, 126, 128, 8, 53248, max_positions=131072),
        _llama("llama-3.2-3b", 128256, 3072, 28, 24, 8, 8192, tied=True, max_positions=131072),
        _llama("llama-3.3-70b", 128256, 8192, 80, 64, 8, 28672, max_positions=131072),
        # Mistral-7B-v0.1: every layer attends within a 4096-token window
        _llama(
            "mistral-7b",
            32000,
            4096,
            32,
            32,
            8,
            14336,
            family=Family.mistral,
            max_positions=32768,
            sliding_window=4096,
        ),
        _llama(
            "qwen2.5-0.5b",
            151936,
            896,
            24,
            14,
            2,
            4864,
            family=Family.qwen2,
            tied=True,
            qkv_bias=True,
            max_positions=32768,
        ),
        # Qwen/Qwen2.5-*: q/k/v biases, no sliding window (use_sliding_window false); the
        # small ones tie their embeddings
        *(
            _llama(
                name,
                vocab,
                hidden,
                layers,
                heads,
                kv_heads,
                width,
                family=Family.qwen2,
                tied=tied,
                qkv_bias=True,
                max_positions=positions,
            )
            for name, vocab, hidden, layers, heads, kv_heads, width, tied, positions in (
                ("qwen2.5-1.5b", 151936, 1536, 28, 12, 2, 8960, True, 131072),
                ("qwen2.5-3b", 151936, 2048, 36, 16, 2, 11008, True, 32768),
                ("qwen2.5-14b", 152064, 5120, 48, 40, 8, 13824, False, 131072),
                ("qwen2.5-32b", 152064, 5120, 64, 40, 8, 27648, False, 131072),
                ("qwen2.5-72b", 152064, 8192, 80, 64, 8, 29568, False, 131072),
            )
        ),
        _llama(
            "qwen2.5-7b",
            152064,
            3584,
            28,
            28,
            4,
            18944,
            family=Family.qwen2,
            qkv_bias=True,
            max_positions=32768,
        ),
        *_family_presets(),
    )
}

DEFAULT_MODEL = "gpt2"


def preset(name: str) -> ModelSpec:
    """The preset ``name`` means -- its name in any case or spacing, or the Hugging Face hub
    id of its checkpoint (``spec/names.py``); a MemcalcError with a "did you mean" and the
    presets otherwise.

    >>> preset("meta-llama/Meta-Llama-3-8B-Instruct").name, preset("LLAMA3-8B").name
    ('llama-3-8b', 'llama-3-8b')
    """
    from memcalc.spec.names import closest, hub_id_guess, resolve

    names = sorted(PRESETS)
    hit = resolve(name, names)
    if hit is not None:
        return PRESETS[hit]
    guess = closest(name, names)
    hub = hub_id_guess(name)
    elsewhere = (
        f"for a model on the Hugging Face hub pass its hub id (ORG/NAME, e.g. {hub}) or the "
        "path of its config.json"
        if hub is not None
        else "a hub id ORG/NAME, a spec .toml/.json or an HF config.json path also works"
    )
    if guess is not None:
        raise MemcalcError(
            f"--model: unknown value {name!r}; did you mean {guess!r}? ({elsewhere}; memcalc "
            "models list shows every preset)"
        )
    if hub is not None:
        raise MemcalcError(f"--model: {name!r} is not a preset; {elsewhere} (memcalc models list)")
    raise one_of("--model", name, names) from None
