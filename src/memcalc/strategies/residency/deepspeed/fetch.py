"""ZeRO-3's parameter coordinator, played over one step's module trace: which gathered 16-bit
parameters (and all-gather buffers) a rank holds during each module's forward and backward.

From ``runtime/zero/partitioned_param_coordinator.py`` (DeepSpeed 0.19.8), with the trace
complete (from the second step on):

* ``fetch_sub_module``: all-gather the module's parameters not yet available, wait for them,
  then prefetch from the trace queue up to ``min(max_live_parameters - available,
  prefetch_bucket_size)`` elements (counting ``ds_numel``; the last may overshoot), the queue
  entries of available parameters popped and skipped. Every hooked module fetches, with
  parameters or not (the model, each decoder layer and its attention / MLP containers: their
  fetch only prefetches).
* ``partition_parameters.py`` ``all_gather_coalesced``: several parameters share one flat
  buffer of ``sum(partition) x ranks`` elements, allocated at submit; the first wait gives
  every parameter of the handle its own ``torch.cat`` copy (``AllGatherCoalescedHandle.wait``),
  and the flat buffer lives until the last of them is waited on (each holds the handle in the
  inflight registry). A single parameter is gathered into ``ceil(numel / ranks) x ranks``
  elements of which ``.data`` is a view (``_all_gather_sequential``).
* ``release_sub_module`` after the module's forward and after its backward
  (``__params_to_release``): a non-persistent parameter is freed unless it is used again within
  ``max_reuse_distance`` elements of parameter traffic in the rest of the trace, or the prefetch
  has already fetched it for a later use. The embedding's post-backward never fires (its input
  needs no gradient): its weight is freed by ``release_backward_leftovers`` at the backward's
  end (``stage3.py backward_epilogue``), after the last gradient bucket is reduced.

The same on CUDA and on the CPU accelerator.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from memcalc.strategies.residency.deepspeed.trace import EPILOGUE, PROLOGUE


@dataclass(frozen=True)
class Call:
    """One module's forward or backward in the trace."""

    layer: int
    params: tuple[int, ...]
    backward: bool


@dataclass
class _Handle:
    buffer: int
    """Bytes of its all-gather buffer."""
    waiting: set[int]
    coalesced: bool
    done: bool = False


@dataclass
class _State:
    gathered: dict[int, int] = field(default_factory=dict)
    """Parameter -> bytes of its gathered data (available or in flight)."""
    handles: dict[int, _Handle] = field(default_factory=dict)
    """Parameter in flight -> its handle."""
    buffers: int = 0
    data: int = 0
    available: int = 0
    """Elements gathered (``__n_available_params``)."""

    @property
    def bytes(self) -> int:
        return self.buffers + self.data


@dataclass(frozen=True)
class Coordinator:
    """The settings and sizes the coordinator works with."""

    numels: tuple[int, ...]
    persistent: frozenset[int]
    ranks: int
    itemsize: int
    prefetch: int
    max_live: int
    reuse: int

    def part(self, p: int) -> int:
        return -(-self.numels[p] // self.ranks)

    def play(self, calls: list[Call]) -> list[int]:
        """Gathered bytes during each call (after its fetch and prefetch), and one more entry:
        after the backward's last release but before the leftovers'."""
        st = _State()
        queue = deque((p, t) for t, c in enumerate(calls) for p in sorted(set(c.params)))
        reuse = _Reuse.of(calls, self.numels)
        fetched_for: dict[int, int] = {}
        out: list[int] = []
        for t, call in enumerate(calls):
            self._fetch(st, call, t, queue, fetched_for)
            out.append(st.bytes)
            if not (call.backward and call.layer == PROLOGUE):  # leftovers: at the very end
                self._release(st, call, t, reuse, fetched_for)
        out.append(st.bytes)
        return out

    def _gather(self, st: _State, params: list[int]) -> None:
        params = [p for p in params if p not in st.gathered and p not in self.persistent]
        if not params:
            return
        coalesced = len(params) > 1
        buffer = sum(self.part(p) for p in params) * self.ranks * self.itemsize
        handle = _Handle(buffer, set(params), coalesced)
        st.buffers += buffer
        for p in params:
            st.gathered[p] = 0
            st.handles[p] = handle
            st.available += self.numels[p]

    def _wait(self, st: _State, p: int) -> None:
        handle = st.handles.pop(p, None)
        if handle is None:
            return
        if not handle.done:
            handle.done = True
            if handle.coalesced:  # every parameter of the handle gets its torch.cat copy
                for q in handle.waiting:
                    st.gathered[q] = self.numels[q] * self.itemsize
                    st.data += st.gathered[q]
        handle.waiting.discard(p)
        if not handle.waiting:
            st.buffers -= handle.buffer
            if not handle.coalesced:  # .data is a view of the buffer: it is the data now
                st.gathered[p] = handle.buffer
                st.data += handle.buffer

    def _fetch(
        self,
        st: _State,
        call: Call,
        t: int,
        queue: deque[tuple[int, int]],
        fetched_for: dict[int, int],
    ) -> None:
        """``_fetch_sub_module_impl``: gather, wait, pop this call's queue entries, prefetch."""
        own = sorted(set(call.params))
        self._gather(st, own)
        for p in own:
            self._wait(st, p)
        fresh = [p for p in own if fetched_for.get(p, -1) < t]
        for _ in fresh:
            if queue:
                p, when = queue.popleft()
                fetched_for[p] = when
        budget = min(self.max_live - st.available, self.prefetch)
        chosen: list[int] = []
        numel = 0
        while queue and numel < budget:
            p, when = queue.popleft()
            fetched_for[p] = max(fetched_for.get(p, -1), when)
            if p not in st.gathered and p not in self.persistent and p not in chosen:
                chosen.append(p)
                numel += self.numels[p]
        self._gather(st, chosen)

    def _release(
        self, st: _State, call: Call, t: int, reuse: _Reuse, fetched_for: dict[int, int]
    ) -> None:
        """``release_sub_module`` after call ``t`` (``__params_to_release`` with step_id
        ``t + 1``): a parameter is kept when the prefetch fetched it for a later use, or when
        its next use comes before ``max_reuse_distance`` elements of the rest of the trace."""
        step = t + 1
        for p in set(call.params) - self.persistent:
            if fetched_for.get(p, -1) > step or reuse.within(p, t, self.reuse):
                continue
            if p in st.gathered and p not in st.handles:
                st.data -= st.gathered.pop(p)
                st.available -= self.numels[p]


@dataclass(frozen=True)
class _Reuse:
    """Each parameter's next use after each call, and the elements the trace traverses."""

    next_use: dict[tuple[int, int], int]
    prefix: tuple[int, ...]
    """Elements of the parameters of calls ``0..t-1`` (``prefix[t]``)."""

    @classmethod
    def of(cls, calls: list[Call], numels: tuple[int, ...]) -> _Reuse:
        nxt: dict[tuple[int, int], int] = {}
        last: dict[int, int] = {}
        for t in range(len(calls) - 1, -1, -1):
            for p in set(calls[t].params):
                if p in last:
                    nxt[(t, p)] = last[p]
                last[p] = t
        prefix = [0]
        for c in calls:
            prefix.append(prefix[-1] + sum(numels[p] for p in c.params))
        return cls(nxt, tuple(prefix))

    def within(self, p: int, t: int, distance: int) -> bool:
        """``p``, used by call ``t``, is used again before ``distance`` elements of the calls
        after ``t`` have been traversed."""
        u = self.next_use.get((t, p))
        return u is not None and self.prefix[u] - self.prefix[t + 1] < distance


def trace_calls(
    modules: list[tuple[int, tuple[int, ...]]],
    containers: int,
    replays: dict[int, tuple[int, ...]] | None = None,
) -> list[Call]:
    """The forward's and the backward's module calls: ``modules`` (layer, parameters) in
    forward order; ``containers`` parameterless hooked modules opening each layer (a decoder
    layer's own, its attention and MLP containers, its activation module), two before the
    embedding (the causal-LM wrapper and the base model). The backward visits them in
    reverse; a checkpointed layer's backward first replays the forward of ``replays[layer]``
    (its segment's layers), which fetches their parameters again."""
    calls: list[Call] = [Call(PROLOGUE, (), False), Call(PROLOGUE, (), False)]
    by_layer: dict[int, list[Call]] = {}
    layer = PROLOGUE
    for lay, params in modules:
        if lay != layer and lay not in (PROLOGUE, EPILOGUE):
            opening = [Call(lay, (), False) for _ in range(containers)]
            calls += opening
            by_layer.setdefault(lay, []).extend(opening)
        layer = lay
        calls.append(Call(lay, params, False))
        by_layer.setdefault(lay, []).append(calls[-1])
    backward: list[Call] = []
    seen: set[int] = set()
    for c in reversed(calls):
        if c.layer not in seen and replays and c.layer in replays:
            for j in replays[c.layer]:
                backward += [Call(c.layer, r.params, True) for r in by_layer.get(j, [])]
        seen.add(c.layer)
        backward.append(Call(c.layer, c.params, True))
    return calls + backward
