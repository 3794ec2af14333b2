"""File manifests: what a dataset's files should be (path, size, sha256), verification, and the version hash.

A dataset's version is the sha256 over its manifest lines ``path\\tsize\\tsha256`` of the files actually read,
so two runs that saw byte-identical data share a version and any changed byte changes it.

A shipped manifest lists a dataset's public files, not only the ones some copy holds: a loader can then tell a
file the copy lacks (absent) from one that does not exist. Where the size or sha256 of a public file is not known
here (the file was never available to check), its field is ``-`` (or empty) and reads as ``None``: the file is
accepted when present, unverified, and its actual size and sha256 still enter the version.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from eegprivacy.errors import InputDataError
from eegprivacy.paths import cache_dir


class DataMissingError(InputDataError, FileNotFoundError):
    """A file the dataset needs is not on disk; the message says which one and how to get it."""


class ChecksumMismatchError(InputDataError, RuntimeError):
    """A file is on disk but its bytes differ from the published ones."""


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative to the dataset's folder inside the data root
    size: int | None  # None: not known here
    sha256: str | None  # None: not known here


UNKNOWN = ("", "-")  # how a manifest writes "not known here" in the bytes or sha256 column
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _field(name: str, line: int, column: str, text: str | None, parse):
    """One bytes/sha256 cell: ``None`` when unknown, else parsed, else an error naming manifest, line and cell."""
    if text is None:
        raise ValueError(f"manifest {name}.tsv line {line}: no {column} column; write it, or '-' when it is not known")
    text = text.strip()
    if text in UNKNOWN:
        return None
    value = parse(text)
    if value is None:
        raise ValueError(f"manifest {name}.tsv line {line}: {column} is {text!r}; write a "
                         f"{'byte count' if column == 'bytes' else '64-digit lowercase hex sha256'}, or '-' when it "
                         "is not known")
    return value


def load_manifest(name: str) -> list[ManifestEntry]:
    """Read the manifest ``<name>.tsv`` shipped inside the package (columns: path, bytes, sha256; ``-`` or an
    empty cell = not known here, read as ``None``)."""
    text = resources.files("eegprivacy.data.manifests").joinpath(f"{name}.tsv").read_text()
    rows = csv.DictReader(text.splitlines(), delimiter="\t")
    return [ManifestEntry(r["path"],
                          _field(name, line, "bytes", r["bytes"], lambda t: int(t) if t.isdigit() else None),
                          _field(name, line, "sha256", r["sha256"], lambda t: t if _SHA256.fullmatch(t) else None))
            for line, r in enumerate(rows, start=2)]


def _hash_cache_path() -> Path:
    return cache_dir() / "file_sha256.json"


def _load_hash_cache() -> dict:
    path = _hash_cache_path()
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return {}
    return {}


def _store_hash_cache(cache: dict) -> None:
    path = _hash_cache_path()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cache, indent=0, sort_keys=True))
    os.replace(tmp, path)


def file_sha256(path: Path, _cache: dict | None = None) -> str:
    """sha256 of a file, cached on (absolute path, size, mtime) so repeated runs do not re-read 100 MB."""
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    cache = _load_hash_cache() if _cache is None else _cache
    if key in cache:
        return cache[key]
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    cache[key] = digest.hexdigest()
    if _cache is None:
        _store_hash_cache(cache)
    return cache[key]


def hash_files(folder: Path, relative_paths: list[str]) -> dict[str, tuple[int, str]]:
    """(size, sha256) for each present file; one cache read and one write for the whole batch."""
    cache = _load_hash_cache()
    out = {}
    for rel in relative_paths:
        full = folder / rel
        if full.exists():
            out[rel] = (full.stat().st_size, file_sha256(full, cache))
    _store_hash_cache(cache)
    return out


def manifest_version(lines: list[tuple[str, int, str]]) -> str:
    """sha256 over sorted ``path\\tsize\\tsha256`` lines: the dataset version logged with every run."""
    digest = hashlib.sha256()
    for rel, size, sha in sorted(lines):
        digest.update(f"{rel}\t{size}\t{sha}\n".encode())
    return digest.hexdigest()
