"""Progress of ``memcalc measure`` and ``memcalc trace`` on stderr.

On a terminal: one line, redrawn in place four times a second, with a bar over the run's
phases (when their number is known), the phase running now and its elapsed seconds -- a
measured step of a large model can take minutes. Elsewhere (a log file, a test's captured
stderr): nothing, or one plain line per top-level phase as it starts. The line is cleared when
the run ends, however it ends, so the report, an error or Ctrl-C's one line stand alone.

A phase is a message; ``"warm-up step: backward"`` is the sub-phase ``backward`` of the phase
``warm-up step`` (plain lines show phases only).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from enum import Enum
from types import TracebackType
from typing import TextIO

REDRAW_S = 0.25
"""Seconds between redraws of the live line."""
BAR_WIDTH = 20


class Mode(str, Enum):
    """How progress is shown (``--progress`` / ``--no-progress``; default auto)."""

    auto = "auto"
    """The live line on a terminal's stderr, else the fallback (plain lines or nothing)."""
    live = "live"
    """The live line, wherever stderr goes."""
    off = "off"
    """Nothing."""


def mode_of(flag: bool | None) -> Mode:
    """``--progress`` -> live, ``--no-progress`` -> off, neither -> auto."""
    return Mode.auto if flag is None else Mode.live if flag else Mode.off


class Progress:
    """Call with each phase's message as it starts; use as a context manager around the run.

    >>> import io
    >>> out = io.StringIO()
    >>> with Progress("memcalc measure", mode=Mode.auto, stream=out) as say:
    ...     say("building the model")
    ...     say("warm-up step: forward")
    ...     say("warm-up step: backward")
    >>> print(out.getvalue(), end="")
    [memcalc measure] building the model ...
    [memcalc measure] warm-up step ...
    """

    def __init__(
        self,
        title: str,
        *,
        total: int | None = None,
        mode: Mode = Mode.auto,
        plain_lines: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.title, self.total = title, total
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.live = mode is Mode.live or (mode is Mode.auto and tty)
        self.plain = mode is Mode.auto and not self.live and plain_lines
        self.done = 0
        self.message = ""
        self.top = ""
        self.started = self.phase_started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False

    def __call__(self, message: str) -> None:
        top = message.split(": ", 1)[0]
        with self._lock:
            if self.message:
                self.done += 1
            self.message, self.phase_started = message, time.monotonic()
        if self.plain and top != self.top:
            print(f"[{self.title}] {top} ...", file=self.stream, flush=True)
        self.top = top
        if self.live:
            self._draw()

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        if self.live:
            self._thread = threading.Thread(target=self._run, name="memcalc-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._drawn:
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self._draw()

    def line(self, now: float | None = None) -> str:
        """The live line's text (without the carriage return).

        >>> p = Progress("memcalc measure", total=4, mode=Mode.off)
        >>> p("building the model"); p("warm-up step: forward")
        >>> p.started = p.phase_started = 0.0
        >>> p.line(now=12.0)
        'memcalc measure [#####---------------] 1/4 warm-up step: forward 12s (total 12s)'
        """
        now = time.monotonic() if now is None else now
        with self._lock:
            done, message, phase_s = self.done, self.message, now - self.phase_started
        total_s = now - self.started
        if self.total:
            filled = BAR_WIDTH * min(done, self.total) // self.total
            bar = f" [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{self.total}"
        else:
            bar = " " + "|/-\\"[int(total_s / REDRAW_S) % 4]
        return f"{self.title}{bar} {message} {phase_s:.0f}s (total {total_s:.0f}s)"

    def _draw(self) -> None:
        width = shutil.get_terminal_size((80, 24)).columns - 1
        text = self.line()[:width]
        with self._lock:
            try:
                self.stream.write(f"\r{text}\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):  # the stream was closed under us
                self._stop.set()
                return
            self._drawn = True
