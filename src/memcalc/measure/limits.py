"""Bounds of ``memcalc measure``'s own flags (no torch here: the CLI reads them to parse)."""

SEED_MAX = 2**64 - 1
"""``torch.Generator.manual_seed`` takes seeds up to 0xffff_ffff_ffff_ffff."""

BATCH_MAX = 1_000_000
"""Largest ``--batch`` / ``--seq`` measure takes: far above any micro-batch that fits a device
(the memory check refuses most before that); it bounds the token ids built first."""
