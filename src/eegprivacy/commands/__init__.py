"""Commands for users of the installed package (``eegprivacy audit-cohort``), as opposed to the pipeline's stage
entry points in the repository's ``experiments/``: everything they need ships inside the package, so they run from
any folder after ``pip install``."""
