"""The names people type for the presets: the preset names in any case and spacing
(``llama3-8b``, ``LLAMA-3-8B``), the Hugging Face hub ids of the checkpoints they describe
(``meta-llama/Meta-Llama-3-8B``, with ``-Instruct`` / ``-chat-hf`` / ``-it`` variants: the same
architecture), and a "did you mean" for near misses."""

from __future__ import annotations

import difflib
import re

HUB_IDS: dict[str, tuple[str, ...]] = {
    "gpt2": ("openai-community/gpt2",),
    "gpt2-medium": ("openai-community/gpt2-medium",),
    "gpt2-large": ("openai-community/gpt2-large",),
    "gpt2-xl": ("openai-community/gpt2-xl",),
    "tinyllama-1.1b": (
        "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
        "TinyLlama/TinyLlama_v1.1",
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    ),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B",),
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf",),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf",),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf",),
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B",),
    "llama-3-70b": ("meta-llama/Meta-Llama-3-70B",),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B"),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", "meta-llama/Meta-Llama-3.1-405B"),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B",),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct",),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1",),
    "mistral-nemo-12b": (
        "mistralai/Mistral-Nemo-Base-2407",
        "mistralai/Mistral-Nemo-Instruct-2407",
    ),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B",),
    "qwen2.5-1.5b": ("Qwen/Qwen2.5-1.5B",),
    "qwen2.5-3b": ("Qwen/Qwen2.5-3B",),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B",),
    "qwen2.5-14b": ("Qwen/Qwen2.5-14B",),
    "qwen2.5-32b": ("Qwen/Qwen2.5-32B",),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B",),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B-Base"),
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", "Qwen/Qwen3-1.7B-Base"),
    "qwen3-4b": ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B-Base"),
    "qwen3-8b": ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-Base"),
    "qwen3-14b": ("Qwen/Qwen3-14B", "Qwen/Qwen3-14B-Base"),
    "qwen3-32b": ("Qwen/Qwen3-32B",),
    "gemma-2-9b": ("google/gemma-2-9b",),
    "gemma-2-27b": ("google/gemma-2-27b",),
    "gemma-3-270m": ("google/gemma-3-270m",),
    "gemma-3-1b": ("google/gemma-3-1b-pt",),
    "gemma-3-4b": ("google/gemma-3-4b-pt",),
    "gemma-3-12b": ("google/gemma-3-12b-pt",),
    "gemma-3-27b": ("google/gemma-3-27b-pt",),
    "mistral-small-24b": (
        "mistralai/Mistral-Small-24B-Base-2501",
        "mistralai/Mistral-Small-24B-Instruct-2501",
    ),
    "phi-3-mini": ("microsoft/Phi-3-mini-4k-instruct",),
    "phi-4": ("microsoft/phi-4",),
    "pythia-6.9b": ("EleutherAI/pythia-6.9b",),
    "opt-6.7b": ("facebook/opt-6.7b",),
    "olmo-2-1b": ("allenai/OLMo-2-0425-1B",),
    "olmo-2-7b": ("allenai/OLMo-2-1124-7B",),
    "olmo-2-13b": ("allenai/OLMo-2-1124-13B",),
    "olmo-2-32b": ("allenai/OLMo-2-0325-32B",),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1",),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base"),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",),
    "qwen1.5-moe-a2.7b": ("Qwen/Qwen1.5-MoE-A2.7B",),
    "deepseek-v2-lite": ("deepseek-ai/DeepSeek-V2-Lite",),
    "deepseek-v3": (
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3-Base",
        "deepseek-ai/DeepSeek-V3-0324",
        # DeepSeek-R1 is DeepSeek-V3's architecture (the same config.json sizes)
        "deepseek-ai/DeepSeek-R1",
        "deepseek-ai/DeepSeek-R1-0528",
        "deepseek-ai/DeepSeek-R1-Zero",
    ),
}
"""Hub ids of the checkpoints each preset's sizes come from (their config.json)."""

_VARIANTS = re.compile(r"[-_](instruct|chat|hf|it|pt|base|v0\.1|v0\.2|v0\.3|4k|8k|128k)$")


def normalized(name: str) -> str:
    """``meta-llama/Meta-Llama-3-8B-Instruct`` -> ``llama38b``: the organisation, a leading
    ``meta-``, fine-tuning suffixes and punctuation dropped, lower case.

    >>> normalized("meta-llama/Meta-Llama-3-8B-Instruct"), normalized("llama3-8b")
    ('llama38b', 'llama38b')
    """
    text = name.strip().lower().rsplit("/", 1)[-1].removeprefix("meta-")
    while (stripped := _VARIANTS.sub("", text)) != text:
        text = stripped
    return re.sub(r"[^a-z0-9]", "", text)


def resolve(name: str, presets: list[str]) -> str | None:
    """The preset ``name`` means (exact, any case and punctuation, or a hub id), or None."""
    if name in presets:
        return name
    index = {normalized(p): p for p in presets}
    for preset_name, hub_ids in HUB_IDS.items():
        for hub_id in hub_ids:
            index.setdefault(normalized(hub_id), preset_name)
    hit = index.get(normalized(name))
    return hit if hit in presets else None


def preset_for_hub_id(repo_id: str, presets: list[str]) -> str | None:
    """The preset a hub id names: one of its checkpoints' ids, or a variant of one
    (``-Instruct``, ``-it``, ...) from the same organisation; None for any other repository
    (another organisation's fine-tune may change the vocabulary: its config.json is read).

    >>> names = sorted(HUB_IDS)
    >>> preset_for_hub_id("meta-llama/Meta-Llama-3-8B-Instruct", names)
    'llama-3-8b'
    >>> preset_for_hub_id("someone/Meta-Llama-3-8B", names) is None
    True
    """
    org = repo_id.split("/", 1)[0].lower()
    key = normalized(repo_id)
    for preset_name, hub_ids in HUB_IDS.items():
        if preset_name not in presets:
            continue
        for hub_id in hub_ids:
            if hub_id.lower() == repo_id.lower() or (
                hub_id.split("/", 1)[0].lower() == org and normalized(hub_id) == key
            ):
                return preset_name
    return None


ORGS = {
    # a model name's first word -> the hub organisation that publishes it
    "llama": "meta-llama",
    "meta-llama": "meta-llama",
    "codellama": "meta-llama",
    "qwen": "Qwen",
    "qwq": "Qwen",
    "gemma": "google",
    "mistral": "mistralai",
    "mixtral": "mistralai",
    "ministral": "mistralai",
    "phi": "microsoft",
    "olmo": "allenai",
    "deepseek": "deepseek-ai",
    "gpt2": "openai-community",
    "pythia": "EleutherAI",
    "opt": "facebook",
    "smollm": "HuggingFaceTB",
}


def hub_id_guess(name: str) -> str | None:
    """The hub id a preset-like name probably means (its organisation from the name's first
    word), or None.

    >>> hub_id_guess("Llama-3.1-70B-Instruct"), hub_id_guess("gtp2")
    ('meta-llama/Llama-3.1-70B-Instruct', None)
    """
    text = name.strip()
    if "/" in text or not re.search(r"\d", text):
        return None
    word = re.split(r"[-_.\d]", text.lower(), maxsplit=1)[0]
    org = ORGS.get(word)
    return f"{org}/{text}" if org else None


def closest(name: str, presets: list[str]) -> str | None:
    """The preset a near miss probably meant (``mixtral`` -> ``mixtral-8x7b``), or None."""
    by_key = {normalized(p): p for p in presets}
    key = normalized(name)
    starts = sorted(p for k, p in by_key.items() if key and k.startswith(key))
    if len(starts) == 1:
        return starts[0]
    close = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.75)
    return by_key[close[0]] if close else None
