"""Study A, the DP feature release, as library code a notebook can import.

``table`` turns a features table into the patient table a release starts from (identifiers never leave it) and
runs the release sweeps; the other modules compose the layers for each question the study asks (intrinsic and
LOSO utility, deployment scenarios, scaling alternatives, attacks on the released table, record linkage, the
mechanism audit, the Optuna search). ``experiments/`` holds only the thin DVC stage entry points over them.
"""
