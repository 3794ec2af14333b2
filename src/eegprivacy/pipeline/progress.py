"""One progress line over phases of unequal work, each estimating its time left from its own measured pace.

A long command reads its inputs, then computes (the cohort audit: recordings, then LOSO cells). A single rate over
both says nothing: reading is fast per step, a cell slow, and cells differ (a nested cell runs four times the fits
of a plain one). So each phase counts its own work in a unit whose cost is about constant (a recording read, a
LOSO fit), and its ETA is the work left in the phase times the seconds per unit measured in this phase so far: "?"
until the first unit is done, never a rate carried over from another phase, never a constant. The elapsed time is
the command's, since the first phase began. Written to a terminal the line redraws in place; to a file or a pipe
(a batch job's log) it prints at most once per ``mininterval`` seconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from eegprivacy.reproduce_progress import clock as clock_text


class PhaseProgress:
    """The line: :meth:`phase` starts a phase of ``total`` units, :meth:`advance` counts units done,
    :meth:`note` says what happens between phases, :meth:`close` ends the line (``leave=False`` clears it).

    Parameters
    ----------
    enabled : bool
        Draw the line; disabled, it still counts (``done``, :meth:`eta_s`).
    clock : callable
        Seconds, monotonic (tests pass a fake one).
    file : file-like
        Where the line goes (stderr).
    mininterval : float, optional
        Seconds between redraws; default 0.2 on a terminal, 30 elsewhere.
    """

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic, file=None,
                 mininterval: float | None = None):
        from tqdm.auto import tqdm

        file = file or sys.stderr
        if mininterval is None:
            mininterval = 0.2 if getattr(file, "isatty", lambda: False)() else 30
        self._clock = clock
        self._began = self._start = clock()
        self.total, self.done, self.unit = 0.0, 0.0, "steps"
        self.bar = tqdm(total=0, disable=not enabled, file=file, dynamic_ncols=True, mininterval=mininterval,
                        bar_format="{desc}")

    def phase(self, description: str, total: float, unit: str) -> None:
        """Start a phase of ``total`` units of ``unit`` (its pace is measured afresh)."""
        self._end_phase()
        self.total, self.done, self.unit = float(total), 0.0, unit
        self._start = self._clock()
        self.bar.set_description_str(description, refresh=False)
        self._draw()
        self.bar.reset(total=total)  # draws the new phase's first line

    def advance(self, amount: float = 1.0) -> None:
        self.done += float(amount)
        self._draw()
        self.bar.update(amount)

    def note(self, description: str) -> None:
        """What the command does between phases (no count, no ETA)."""
        self._end_phase()
        self.total = 0.0
        self.bar.set_description_str(description, refresh=False)
        self.bar.bar_format = "{desc}"
        self.bar.refresh()

    def eta_s(self) -> float | None:
        """Seconds left in this phase at its measured pace; None before its first unit."""
        if self.done <= 0:
            return None
        return (self._clock() - self._start) / self.done * max(self.total - self.done, 0.0)

    def _end_phase(self) -> None:
        """Draw the phase under way as it ends, so a log (where the line is printed every ``mininterval`` seconds
        only) shows each phase's last count and time."""
        if self.total > 0:
            self._draw(refresh=True)

    def _draw(self, refresh: bool = False) -> None:
        eta = self.eta_s()
        elapsed = clock_text(self._clock() - self._began)
        # the line's format carries the times (braces escaped): tqdm's own {elapsed} and {remaining} are the bar's
        self.bar.bar_format = (f"{{desc}}: {self.done:.0f}/{self.total:.0f} {self.unit} |{{bar}}| {elapsed} elapsed, "
                               f"ETA {'?' if eta is None else clock_text(eta)}")
        if refresh:
            self.bar.refresh()

    def close(self, leave: bool = True) -> None:
        self.bar.leave = leave
        self.bar.close()
