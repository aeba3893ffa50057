"""LayerLayout: every closed-form query equals the same question of the explicit layer list."""

from hypothesis import given, settings
from hypothesis import strategies as st

from memcalc.graph.layout import LayerLayout

KINDS = st.integers(0, 3)


@st.composite
def layouts(draw):
    """A layout built as the estimate builds them (a head, then a period), and its layer list."""
    head = draw(st.lists(KINDS, max_size=5))
    period = draw(st.lists(KINDS, min_size=1, max_size=6))
    n = draw(st.integers(len(head), len(head) + 40))
    kinds = (list(head) + [period[i % len(period)] for i in range(n - len(head))])[:n]
    return LayerLayout.periodic(period, n, head=head), kinds


VALUES = (7, 11, 13, 17)


@settings(max_examples=300, deadline=None)
@given(layouts(), st.data())
def test_queries_equal_the_explicit_list(lay, data):
    layout, kinds = lay
    n = len(kinds)
    assert layout.n == n
    assert [layout.kind_at(i) for i in range(n)] == kinds
    assert layout.counts(4) == tuple(kinds.count(k) for k in range(4))
    i = data.draw(st.integers(0, n))
    assert layout.prefix_sum(VALUES, i) == sum(VALUES[k] for k in kinds[:i])
    k = data.draw(st.integers(1, 9))
    assert layout.sum_at_multiples(VALUES, k, i) == sum(VALUES[kinds[j]] for j in range(0, i, k))
    kind = data.draw(KINDS)
    where = [j for j, x in enumerate(kinds) if x == kind]
    for m in range(len(where) + 1):
        assert layout.index_of_occurrence(kind, m) == (where[m] if m < len(where) else n)
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    sliced = layout.slice(a, b)
    assert [sliced.kind_at(j) for j in range(b - a)] == kinds[a:b]
    split = layout.split_at([a, b])
    assert [split.kind_at(j) for j in range(n)] == kinds


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_families_cover_every_layer_once_with_one_kind_each(lay):
    layout, kinds = lay
    members = []
    for f in layout.progressions():
        layers = [f.at(t) for t in range(f.count)]
        assert len({kinds[j] for j in layers}) == 1
        members += layers
    assert sorted(members) == list(range(len(kinds)))


@settings(max_examples=200, deadline=None)
@given(st.lists(KINDS, max_size=60))
def test_from_kinds_reproduces_any_list(kinds):
    layout = LayerLayout.from_kinds(kinds)
    assert [layout.kind_at(i) for i in range(len(kinds))] == kinds


def test_sizes_do_not_grow_with_depth():
    assert LayerLayout.uniform(10**6).size == LayerLayout.uniform(2).size == 2
    gemma = LayerLayout.from_kinds([0, 0, 0, 0, 0, 1] * 10 + [0, 0])
    assert gemma.size == 7  # one piece, a period of six
    deepseek = LayerLayout.from_kinds([1, 1, 1] + [0] * 58)
    assert [(p.period, p.length) for p in deepseek.pieces] == [((1,), 3), ((0,), 58)]
