"""The inputs of the commands, as a library: every flag declared once (``catalog``), parsed the
same way from the command line and from Python keyword arguments (``flags``), and read into a
model, GPU profiles, a training setup and a strategy (``read``). The CLI (``memcalc.cli``) and
the Python API (``memcalc.api``) are thin shells over it."""

from memcalc.inputs.read import (
    Inputs,
    estimate_inputs,
    estimate_options,
    keyword_values,
    read_inputs,
    with_configs,
)

__all__ = [
    "Inputs",
    "estimate_inputs",
    "estimate_options",
    "keyword_values",
    "read_inputs",
    "with_configs",
]
