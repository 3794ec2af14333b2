"""Study B, federated membership inference, as library code a notebook can import.

``mia`` holds the federation of one cohort (one client per subject, per-client CSP), a cell's training and its
record/feature/gradient/client-level attacks; ``cumulative`` reads the accountant's rows back for the reports;
the other modules compose LiRA, accounting, the Optuna search and the input exploration.
"""
