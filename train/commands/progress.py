"""Progress of long work on the command line: the rate and the time left, as a bar or as log lines.

On a terminal, a ``Meter`` draws one line on stderr, redrawn at most ten
times a second: the bar, the count, entries/s and the ETA. Elsewhere (a job
under a scheduler, output to a file) a bar is only noise, so it logs a line
through ``logging`` every ``every`` seconds instead, under the ``readerkit``
logger, which ``log_to_stderr`` points at stderr for the CLI. ``train``,
``tokenize``, ``pipeline run`` and ``cache clear`` use it.

>>> import logging, sys
>>> clock = iter([0.0, 10.0, 40.0, 41.0]).__next__
>>> meter = Meter("pass 0", 1000, every=30, clock=clock, tty=False)
>>> logging.getLogger("readerkit").addHandler(handler := logging.StreamHandler(sys.stdout))
>>> logging.getLogger("readerkit").setLevel(logging.INFO)
>>> meter.update(100)  # 10 s in: not yet
>>> meter.update(300)  # 40 s in: a line
pass 0: 400/1,000 entries (40%), 10 entries/s, ETA 1:00
>>> meter.close()
>>> logging.getLogger("readerkit").removeHandler(handler)
"""
from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import click

__all__ = ["LOGGER", "PROGRESS_EVERY", "Meter", "duration", "log_to_stderr", "progress_every"]

LOGGER = logging.getLogger("readerkit")
#: Seconds between two progress lines where there is no terminal, unless --progress-every says otherwise.
PROGRESS_EVERY = 30.0
_REDRAW = 0.1  # seconds between two redraws of a terminal's bar
_BAR = 24


def duration(seconds: float) -> str:
    """``seconds`` as H:MM:SS, or M:SS under an hour; ``?`` when unknown.

    >>> duration(75), duration(3725.2), duration(math.inf)
    ('1:15', '1:02:05', '?')
    """
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Meter:
    """Counts work done towards ``total`` (None: unknown) and shows it with its rate and the time left.

    ``update(n, entries=None)`` adds ``n`` of ``unit`` done (and ``entries``
    to the rate, when a unit of work is not an entry: a step of a batch);
    ``rate_unit`` names them (``unit`` when not given). The rate counts from the meter's start or last ``restart``, not work done
    before it (``done``: where a resumed pass starts). ``tty`` decides bar or
    log lines (default: whether stderr is a terminal); ``clock`` is for tests.
    ``restart`` begins a new count (the next pass) keeping the log's cadence.

    >>> clock = iter([0.0, 2.0]).__next__
    >>> meter = Meter("tokenizing", 500, unit="tokens", clock=clock, tty=False)
    >>> meter.update(100)
    >>> meter.line()
    'tokenizing: 100/500 tokens (20%), 50 tokens/s, ETA 0:08'
    """

    def __init__(self, label: str, total: int | None = None, *, unit: str = "entries", rate_unit: str | None = None,
                 done: int = 0, every: float | None = None, clock: Callable[[], float] = time.monotonic,
                 tty: bool | None = None, logger: logging.Logger = LOGGER):
        self.unit, self.rate_unit, self.clock, self.logger = unit, rate_unit or unit, clock, logger
        self.every = progress_every() if every is None else every
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.drawn, self.width = False, 0
        self.restart(label, total, done)
        self.logged = self.started

    def restart(self, label: str | None = None, total: int | None = None, done: int = 0) -> None:
        """Count anew from ``done`` towards ``total`` (under ``label``), closing a bar on the terminal."""
        self.close()
        self.label = self.label if label is None else label
        self.total, self.done, self.first, self.entries = total, done, done, 0
        self.started = self.now = self.clock()
        self.redrawn = -math.inf

    def update(self, n: int = 1, entries: int | None = None) -> None:
        """Add ``n`` done (and ``entries`` to the rate; ``n`` when not given); draw or log when it is time."""
        self.done += n
        self.entries += n if entries is None else entries
        self.now = self.clock()
        if self.tty:
            if self.now - self.redrawn >= _REDRAW or self.done == self.total:
                self.redrawn = self.now
                self._draw()
        elif self.now - self.logged >= self.every:
            self.logged = self.now
            self.logger.info(self.line())

    @property
    def rate(self) -> float:
        """Entries (``rate_unit``) a second since the start; NaN before any time has passed."""
        elapsed = self.now - self.started
        return self.entries / elapsed if elapsed > 0 else math.nan

    @property
    def eta(self) -> float:
        """Seconds left at the rate so far (in ``unit`` done a second); inf when unknown."""
        elapsed = self.now - self.started
        if self.total is None or elapsed <= 0:
            return math.inf
        done_rate = (self.done - self.first) / elapsed
        return max(self.total - self.done, 0) / done_rate if done_rate > 0 else math.inf

    def _rate_text(self) -> str:
        return f"{self.rate:,.0f} {self.rate_unit}/s" if math.isfinite(self.rate) else f"? {self.rate_unit}/s"

    def line(self) -> str:
        """The progress in words, as logged."""
        if self.total is None:
            return f"{self.label}: {self.done:,} {self.unit}, {self._rate_text()}"
        share = 100 * self.done / self.total if self.total else 100.0
        return (f"{self.label}: {self.done:,}/{self.total:,} {self.unit} ({share:.0f}%), {self._rate_text()}, "
                f"ETA {duration(self.eta)}")

    def _draw(self) -> None:
        if self.total:
            filled = min(_BAR, _BAR * self.done // self.total)
            text = (f"{self.label}  [{'#' * filled}{'-' * (_BAR - filled)}]  {self.done:,}/{self.total:,} {self.unit}  "
                    f"{self._rate_text()}  ETA {duration(self.eta)}")
        else:
            text = f"{self.label}  {self.done:,} {self.unit}  {self._rate_text()}"
        click.echo(f"\r{text.ljust(self.width)}", nl=False, err=True)  # spaces over what a longer line left
        self.width, self.drawn = len(text), True

    def close(self) -> None:
        """End the bar's line on the terminal (nothing to do for log lines)."""
        if self.drawn:
            self._draw()
            click.echo("", err=True)
            self.drawn, self.width = False, 0

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_every() -> float:
    """Seconds between two progress lines off a terminal: the CLI's ``--progress-every``, else ``PROGRESS_EVERY``.

    >>> progress_every()
    30.0
    """
    ctx = click.get_current_context(silent=True)
    given = None if ctx is None else ctx.find_root().params.get("progress_every")
    return PROGRESS_EVERY if given is None else float(given)


class _Stderr(logging.Handler):
    """Writes each record to the stderr of the moment (a test's runner swaps it), as click does."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except Exception:  # as logging's own handlers: a failing handler never stops the work
            self.handleError(record)


def log_to_stderr(logger: logging.Logger = LOGGER) -> None:
    """Send ``logger``'s INFO lines to stderr, time-stamped, once (the CLI's progress off a terminal), unless the
    program set up the logger itself.

    >>> log_to_stderr(logging.getLogger("readerkit.doctest"))
    >>> [type(h).__name__ for h in logging.getLogger("readerkit.doctest").handlers]
    ['_Stderr']
    """
    if logger.handlers:
        return
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
