"""A differential test of the estimate against real training steps (issue 20).

Configurations are drawn at random from a seeded sampler (``sampler``) over every flag the
estimate accepts for LoRA / QLoRA and full fine-tuning, on each family's tiny HF config; each
is run for real (the same code path as ``memcalc measure``) and estimated (``runner``), PEFT is
also asked independently what it builds from the user's own flags (``peft_probe``), and the
outcomes are summarised (``summary``). ``benchmarks/differential.py`` is the command line.

Nothing here changes a modelling rule: it finds where they miss.
"""
