"""The examples in the library's docstrings run and hold (the torch-free modules; measure and
trace import torch and are checked by their own tests)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import memcalc

SKIP = ("memcalc.measure",)
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(memcalc.__path__, "memcalc.")
    if not m.name.startswith(SKIP) and not m.name.startswith("memcalc._")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
