"""On-demand benchmarks (`make bench`): the project's fast paths against plain baselines, in one run.

A regular package on purpose: opacus installs a stray top-level `benchmarks` package into site-packages, and a
folder without `__init__.py` would lose to it on import.
"""
