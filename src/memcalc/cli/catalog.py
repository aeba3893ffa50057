"""``memcalc profiles`` and ``memcalc models``: what is built in."""

from __future__ import annotations

import click

from memcalc.cli.common import OUTPUT, terminal_width
from memcalc.cli.options import option
from memcalc.params import count_params
from memcalc.profiles import list_profiles, load_profile
from memcalc.spec.presets import PRESETS
from memcalc.units import Unit, to_unit

PROFILES_EXAMPLES = """\b
Examples:
  memcalc profiles list
  memcalc profiles list --unit GB
  memcalc profiles show h100
"""
MODELS_EXAMPLES = """\b
Examples:
  memcalc models list
"""


@click.group("profiles", no_args_is_help=True, epilog=PROFILES_EXAMPLES)
def profiles_app() -> None:
    """GPU profiles (profiles/*.toml): list, show."""


@click.group("models", no_args_is_help=True, epilog=MODELS_EXAMPLES)
def models_app() -> None:
    """Built-in model presets: list."""


@profiles_app.command("list", epilog=PROFILES_EXAMPLES)
@option(OUTPUT[1])
def profiles_list(unit: Unit) -> None:
    """List the built-in GPU profiles."""
    from tabulate import tabulate

    rows = []
    for name in list_profiles():
        p = load_profile(name)
        rows.append(
            [
                name,
                p.display_name,
                f"{to_unit(p.memory_bytes, unit):.1f}",
                f"{p.bf16_flops_per_s / 1e12:.0f}",
                f"{p.host_link_bytes_per_s / 1e9:.0f}",
                p.host_link,
                str(p.gpus_per_node),
                f"{p.intra_node_bytes_per_s / 1e9:.0f}",
            ]
        )
    click.echo(
        tabulate(
            rows,
            headers=[
                "name",
                "GPU",
                f"memory ({unit.value})",
                "bf16 dense TFLOP/s",
                "host GB/s",
                "host link",
                "GPUs/node",
                "intra-node GB/s",
            ],
            disable_numparse=True,
        )
    )


@profiles_app.command("show", epilog=PROFILES_EXAMPLES)
@click.argument("name")
def profiles_show(name: str) -> None:
    """Show every field of one GPU profile; fields a profile file leaves out are marked."""
    from tabulate import tabulate

    from memcalc.profiles import REFERENCE_PROFILE

    p = load_profile(name)
    defaulted = set(p.defaulted_fields())

    def mark(field: str) -> str:
        own = field in ("display_name", "source", "notes")
        return " (not set: default)" if own else f" (not set: {REFERENCE_PROFILE}'s figure)"

    rows = [[k, f"{v}{mark(k)}" if k in defaulted else str(v)] for k, v in p.fields().items()]
    # the values wrap to the terminal ($COLUMNS): the field column, two spaces, the rest
    value_width = max(20, terminal_width() - max(len(r[0]) for r in rows) - 2)
    click.echo(
        tabulate(
            rows,
            headers=["field", "value"],
            disable_numparse=True,
            maxcolwidths=[None, value_width],
        )
    )


@models_app.command("list", epilog=MODELS_EXAMPLES)
def models_list() -> None:
    """List the built-in model presets with their exact parameter counts."""
    from tabulate import tabulate

    rows = [
        [
            n,
            s.family.value,
            f"{count_params(s).total:,}",
            s.num_layers,
            s.hidden_size,
            s.num_heads,
            s.kv_heads,
            s.mlp_size,
            s.vocab_size,
            "yes" if s.tie_embeddings else "no",
        ]
        for n, s in PRESETS.items()
    ]
    click.echo(
        tabulate(
            rows,
            headers=[
                "name",
                "family",
                "parameters",
                "layers",
                "hidden",
                "heads",
                "kv heads",
                "mlp",
                "vocab",
                "tied",
            ],
            disable_numparse=True,
        )
    )
