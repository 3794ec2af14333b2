"""The one error family for bad input.

:class:`InputDataError` is raised by the data and signal layers (and the cohort audit) when the *input* is wrong —
a missing or unreadable file, a label column that is not binary, NaN samples, a cohort with one class — never for
a bug. Its message names the file, column or value and says what to do, so a command-line tool prints it as one
line and exits non-zero instead of a traceback. Each concrete error also derives from the builtin it always was
(``ValueError``, ``FileNotFoundError``, ...), so existing ``except`` clauses keep working.
"""

from __future__ import annotations


class InputDataError(Exception):
    """The input cannot be used as given; the message names the file, column or value and the fix."""


class InvalidInputError(InputDataError, ValueError):
    """Bad input that has no more specific class (e.g. every recording too short for the filter)."""


__all__ = ["InputDataError", "InvalidInputError"]
