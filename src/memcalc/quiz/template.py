"""The words of one generated question in one language (``templates.py`` and the
``words_*.py`` modules fill it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Template:
    """The words of one generated question in one language."""

    prompt: str
    explanation: str
    parts: dict[str, str] = field(default_factory=dict)
    """Optional sentences the generator picks from and passes in as values."""
