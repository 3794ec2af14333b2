"""reporting layer: every figure, markdown table and headline JSON the studies write, and their formatting.

Drawing functions take the rows to draw (and, where a caller composes a figure, a passed-in ``matplotlib``
figure or axes), so computing and drawing live apart as in MNE (``epochs.py`` -> ``viz/epochs.py``).
Nothing here computes a number a table reports: it formats and draws what the study layers computed.
"""
