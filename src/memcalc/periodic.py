"""The smallest period of a sequence: one algorithm for the two places that compress a model's
layer types (``graph/layout.py``: block kinds; ``spec/families/base.py``: HF ``layer_types``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def smallest_period(seq: Sequence[Any]) -> int:
    """The smallest p with ``seq[i] == seq[i + p]`` for every i (0 for an empty sequence):
    the length minus the longest proper border, from the KMP failure function (Knuth, Morris
    and Pratt 1977).

    >>> smallest_period("abcabca"), smallest_period([1, 1, 1]), smallest_period("abcd")
    (3, 1, 4)
    """
    n = len(seq)
    if n == 0:
        return 0
    fail = [0] * n
    j = 0
    for i in range(1, n):
        while j and seq[i] != seq[j]:
            j = fail[j - 1]
        if seq[i] == seq[j]:
            j += 1
        fail[i] = j
    return n - fail[-1]
