"""Building blocks of the op graph, one module per feature: each function appends the ops one
piece of the real implementation runs, with exactly the tensors autograd saves for them (the
torch op or HF code it mirrors is named in its docstring)."""
