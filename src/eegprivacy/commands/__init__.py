"""Commands for users of the installed package (``eegprivacy audit-cohort``), as opposed to the pipeline's stage
entry points in the repository's ``experiments/``: everything they need ships inside the package, so they run from
any folder after ``pip install``."""


def key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` words of a flag (``--dataset-arg folder=/x line_freq=50``) as a mapping; a word without ``=`` is
    a ValueError naming the flag."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{flag} {item!r} must look like KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
