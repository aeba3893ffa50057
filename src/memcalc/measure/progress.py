"""Progress of ``memcalc measure`` and ``memcalc trace`` on stderr.

On a terminal: a rich progress bar over the run's phases (building the model, each part of
the warm-up and of the measured step), the phase running now and the elapsed time -- a measured
step of a large model can take minutes. It is transient: cleared when the run ends, however it
ends, so the report, an error or Ctrl-C's one line stand alone. Elsewhere (a log file, a
pipe, a test's captured stderr) and with ``--quiet``: nothing, so an error stays one line.
Without rich installed: one plain line per top-level phase on a terminal.

A phase is a message; ``"warm-up step: backward"`` is the sub-phase ``backward`` of the phase
``warm-up step`` (plain lines show phases only).
"""

from __future__ import annotations

import sys
from enum import Enum
from types import TracebackType
from typing import Any, TextIO


class Mode(str, Enum):
    """How progress is shown."""

    auto = "auto"
    """The bar on a terminal's stderr, else nothing."""
    live = "live"
    """The bar, wherever stderr goes."""
    off = "off"
    """Nothing (``--quiet``)."""


def mode_of(quiet: bool) -> Mode:
    """``--quiet`` -> off, else auto."""
    return Mode.off if quiet else Mode.auto


class Progress:
    """Call with each phase's message as it starts; use as a context manager around the run.

    >>> import io
    >>> out = io.StringIO()  # not a terminal: nothing
    >>> with Progress("memcalc measure", total=3, stream=out) as say:
    ...     say("building the model")
    ...     say("warm-up step: forward")
    >>> out.getvalue(), say.done, say.message
    ('', 1, 'warm-up step: forward')
    """

    def __init__(
        self,
        title: str,
        *,
        total: int | None = None,
        mode: Mode = Mode.auto,
        stream: TextIO | None = None,
    ) -> None:
        self.title, self.total = title, total
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.live = mode is Mode.live or (mode is Mode.auto and tty)
        self.plain = False
        self.done = 0
        self.message = ""
        self.top = ""
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, message: str) -> None:
        top = message.split(": ", 1)[0]
        if self.message:
            self.done += 1
        self.message = message
        if self.plain and top != self.top:
            print(f"[{self.title}] {top} ...", file=self.stream, flush=True)
        self.top = top
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, description=message)

    def __enter__(self) -> Progress:
        if self.live:
            self._bar = self._rich_bar()
            if self._bar is None:  # rich is not installed: plain lines instead
                self.live, self.plain = False, True
            else:
                self._bar.start()
                self._task = self._bar.add_task("starting", total=self.total)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()  # transient: the bar is erased
            self._bar = None
        if kind is KeyboardInterrupt:  # say where it stopped
            raise Interrupted(self.message) from None

    def _rich_bar(self) -> Any:
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )
        except ImportError:
            return None
        console = Console(file=self.stream, force_terminal=True, stderr=self.stream is sys.stderr)
        return RichProgress(
            SpinnerColumn(),
            TextColumn(self.title, style="bold", markup=False),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.description}", markup=False),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            refresh_per_second=4,
        )


def interrupted(command: str, phase: str = "") -> str:
    """Ctrl-C's one line (the command exits 130).

    >>> interrupted("measure", "measured step: backward")
    'interrupted: memcalc measure stopped at measured step: backward (Ctrl-C)'
    """
    at = f" at {phase}" if phase else ""
    return f"interrupted: memcalc {command} stopped{at} (Ctrl-C)"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with the phase it stopped in."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase
