"""Hypothesis profiles of the fuzz suite: ``ci`` (the default: a fixed, derandomized number of
examples per test, the whole suite within about a minute) and ``slow`` (ten times as many,
random; the ``slow``-marked copies of each property, ``pytest -m slow tests/fuzz``)."""

from hypothesis import HealthCheck, Phase, settings

_QUIET = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.function_scoped_fixture,
]

settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=_QUIET,
    print_blob=False,
)
settings.register_profile(
    "slow",
    max_examples=400,
    derandomize=False,
    database=None,
    deadline=None,
    suppress_health_check=_QUIET,
)
# counting mode (tools/fuzz_count.py): every generated case runs, none is shrunk
settings.register_profile(
    "count",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.generate],
)
