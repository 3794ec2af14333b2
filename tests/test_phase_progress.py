"""The audit's progress line (issue 49, point 7): the time left comes from the pace measured in the phase under way
(seconds per recording read, then seconds per LOSO fit of the cells), never from a rate carried over from another
phase nor from a count of cells of unequal cost."""

from __future__ import annotations

import io

from eegprivacy.pipeline.progress import PhaseProgress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_eta_is_the_work_left_at_the_pace_measured_in_this_phase():
    clock, stream = Clock(), io.StringIO()
    line = PhaseProgress(clock=clock, file=stream, mininterval=0)
    line.phase("audit: reading recordings", 10, "recordings")
    assert line.eta_s() is None  # nothing measured yet: "?"
    for _ in range(4):
        clock.now += 0.5
        line.advance()
    assert line.eta_s() == 3.0  # 6 recordings left at the measured 0.5 s each
    clock.now += 60  # labels and cohort, between the phases
    line.phase("audit: utility and attack cells", 1000, "LOSO fits")
    assert line.eta_s() is None  # the reading pace says nothing about the cells
    clock.now += 10
    line.advance(24)   # a plain LOSO cell: 24 fits
    clock.now += 40
    line.advance(96)   # a nested cell: 4x the fits, 4x the time
    assert line.eta_s() == 880 * (50 / 120)
    line.close()
    text = stream.getvalue()
    assert "audit: reading recordings: 4/10 recordings" in text and "ETA 0:03" in text
    assert "audit: utility and attack cells: 120/1000 LOSO fits" in text and "ETA 6:07" in text
    assert "1:52 elapsed" in text  # since the first phase began, not since this one


def test_disabled_line_still_counts():
    line = PhaseProgress(enabled=False, clock=Clock())
    line.phase("x", 2, "things")
    line.advance()
    assert line.done == 1
