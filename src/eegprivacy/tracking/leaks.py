"""A scanner for identifiers in everything a pipeline wrote: tables, JSON, logs, MLflow's sqlite store, artifacts.

Why bytes and not parsed records: a leak can sit anywhere a parser would not look — a deleted MLflow param still
on a free sqlite page, the write-ahead log, a figure's metadata, a file name. So every file is searched as raw
bytes (sqlite stores text as plain UTF-8), with two exceptions where raw bytes would mislead:

- PNG: the image data is deflate-compressed, so raw bytes can neither show text nor be trusted not to contain a
  short identifier by chance; the text chunks (``tEXt``, ``zTXt``, ``iTXt``), where a title or a metadata value
  would sit, are decoded and searched instead. Text drawn into the pixels cannot be found this way.
- sqlite: a store named directly brings its ``-wal``, ``-shm`` and ``-journal`` companions with it. Strings
  that match only as whole words (short subject codes) are looked for in the store's live text and blob values,
  read through sqlite itself (which sees the write-ahead log), not in its raw pages: a b-tree page is binary, so
  three bytes such as ``s04`` turn up in a cell-pointer array by chance (seen in a 2 MB MLflow store), while a
  real short value sits flush against its neighbouring columns, where no word boundary is left to find. Longer
  strings (pseudonyms, keys) are still searched in the raw bytes too, free pages and companions included.

Other compressed containers (parquet pages, zip, gzip, pickles of compressed arrays) are searched as raw bytes
only, so what they compress is not seen: keep identifiers out of them by construction.

A hit names the file, the kind of string and its index in the caller's list, never the string itself, so a
report (or a failing test) does not become the leak.
"""

from __future__ import annotations

import mmap
import sqlite3
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Hit", "scan_for_identifiers", "files_under"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SQLITE_SIGNATURE = b"SQLite format 3\x00"
_SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Hit:
    """One forbidden string found: where, what kind, which one (by index), at which offset of what was read.

    ``shown`` is the path with every component that holds a forbidden string replaced by ``<redacted>``: it is
    what ``str(hit)`` prints, so a report never repeats a leaked name.
    """

    path: Path
    kind: str
    index: int
    offset: int
    part: str  # "bytes", "png text", or "name" (of the file or folder itself)
    shown: str

    def __str__(self) -> str:
        return f"{self.shown}: {self.kind} #{self.index} in {self.part} at offset {self.offset}"


def files_under(paths: Iterable[str | Path]) -> list[Path]:
    """Every regular file under ``paths`` (files or folders, recursively), plus the companions of sqlite stores;
    symbolic links are not followed."""
    found: set[Path] = set()
    for entry in map(Path, paths):
        if entry.is_symlink():
            continue
        if entry.is_dir():
            found.update(p for p in entry.rglob("*") if p.is_file() and not p.is_symlink())
        elif entry.is_file():
            found.add(entry)
            found.update(c for c in (entry.with_name(entry.name + s) for s in _SQLITE_COMPANIONS) if c.is_file())
    return sorted(found)


def _png_text(data: bytes) -> bytes:
    """The decoded text chunks of a PNG, joined by newlines (empty for a malformed file)."""
    texts, position = [], len(_PNG_SIGNATURE)
    while position + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        position += 12 + length
        try:
            if kind == b"tEXt":
                texts.append(body.replace(b"\0", b"\n"))
            elif kind == b"zTXt":
                keyword, _, rest = body.partition(b"\0")
                texts.append(keyword + b"\n" + zlib.decompress(rest[1:]))
            elif kind == b"iTXt":
                keyword, _, rest = body.partition(b"\0")
                compressed, rest = rest[0], rest[2:]
                language, _, rest = rest.partition(b"\0")
                translated, _, text = rest.partition(b"\0")
                texts.append(b"\n".join([keyword, language, translated,
                                         zlib.decompress(text) if compressed else text]))
            elif kind == b"IEND":
                break
        except (zlib.error, IndexError):
            texts.append(body)  # undecodable: search it as it is
    return b"\n".join(texts)


def _needles(forbidden: Mapping[str, Iterable[str]] | Iterable[str], min_length: int,
             whole_words: Iterable[str]) -> list[tuple[str, int, bytes, bool]]:
    groups = forbidden.items() if isinstance(forbidden, Mapping) else [("identifier", forbidden)]
    whole = set(whole_words)
    out = []
    for kind, strings in groups:
        for index, text in enumerate(strings):
            if len(text) < min_length:
                raise ValueError(f"{kind} #{index} is shorter than {min_length} characters: searching for it would "
                                 "find it by chance; leave it out or lower min_length on purpose")
            out.append((kind, index, text.encode("utf-8"), kind in whole))
    return out


_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _find(blob, needle: bytes, whole_word: bool) -> int:
    """First offset of ``needle``; as a whole word, it must not touch an ASCII letter or digit on either side
    (an underscore or a dash is a boundary: ``auroc_P01`` still counts)."""
    offset = blob.find(needle)
    while whole_word and offset >= 0:
        before = blob[offset - 1] if offset > 0 else None
        end = offset + len(needle)
        after = blob[end] if end < len(blob) else None
        if before not in _WORD and after not in _WORD:
            break
        offset = blob.find(needle, offset + 1)
    return offset


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_SIGNATURE)) == _SQLITE_SIGNATURE
    except OSError:
        return False


def _is_sqlite_companion(path: Path) -> bool:
    return any(path.name.endswith(suffix) and _is_sqlite(path.with_name(path.name[:-len(suffix)]))
               for suffix in _SQLITE_COMPANIONS)


def _sqlite_values(path: Path):
    """Every text and blob value of every table of the store, read-only, one at a time."""
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in connection.execute("select name from sqlite_master where type = 'table'")]
        for table in tables:
            quoted = table.replace('"', '""')
            for row in connection.execute(f'select * from "{quoted}"'):
                for value in row:
                    if isinstance(value, str):
                        yield value.encode("utf-8", "surrogateescape")
                    elif isinstance(value, bytes):
                        yield value
    finally:
        connection.close()


def _search_sqlite_values(path: Path, needles, shown: str) -> list[Hit]:
    """Whole-word needles in the live values of a store; the offset is the value's position in the scan."""
    hits, pending = [], list(needles)
    for position, value in enumerate(_sqlite_values(path)):
        found = [n for n in pending if _find(value, n[2], n[3]) >= 0]
        hits += [Hit(path, kind, index, position, "sqlite value", shown) for kind, index, _, _ in found]
        pending = [n for n in pending if n not in found]
        if not pending:
            break
    return hits


def _search(blob, needles, path: Path, part: str, shown: str) -> list[Hit]:
    hits = []
    for kind, index, needle, whole_word in needles:
        offset = _find(blob, needle, whole_word)
        if offset >= 0:
            hits.append(Hit(path, kind, index, offset, part, shown))
    return hits


def scan_for_identifiers(paths: Iterable[str | Path], forbidden: Mapping[str, Iterable[str]] | Iterable[str], *,
                         min_length: int = 3, whole_words: Iterable[str] = ()) -> list[Hit]:
    """Every file under ``paths`` that contains (in its bytes, PNG text or name) a string of ``forbidden``, and
    every folder under them whose name does.

    ``forbidden`` maps a kind ("subject id", "GlobalID", "linkage key", ...) to its strings, or is a plain list.
    Matching is exact and case-sensitive on the UTF-8 bytes: pass the variants you mean (upper case, other
    formats). Strings shorter than ``min_length`` are refused, since they would match by chance. The kinds named
    in ``whole_words`` match only as whole words: short codes such as ``s03`` also occur inside ordinary words
    (``seeds03``, ``cmss10.ttf``), while a pseudonym or a key is a leak wherever it sits. One hit per
    (file, part, string): the first offset.
    """
    needles = _needles(forbidden, min_length, whole_words)
    named: dict[str, bool] = {}

    def leaks(name: str) -> bool:
        if name not in named:
            encoded = name.encode("utf-8", "surrogateescape")
            named[name] = any(_find(encoded, needle, whole) >= 0 for _, _, needle, whole in needles)
        return named[name]

    def shown(path: Path) -> str:
        return str(Path(*("<redacted>" if leaks(part) else part for part in path.parts)))

    hits: list[Hit] = []
    folders = sorted({d for entry in map(Path, paths) if entry.is_dir() and not entry.is_symlink()
                      for d in [entry, *entry.rglob("*")] if d.is_dir() and not d.is_symlink()})
    for folder in folders:
        hits += _search(folder.name.encode("utf-8", "surrogateescape"), needles, folder, "name", shown(folder))
    for path in files_under(paths):
        where = shown(path)
        hits += _search(path.name.encode("utf-8", "surrogateescape"), needles, path, "name", where)
        if path.stat().st_size == 0:
            continue
        with open(path, "rb") as handle:
            if handle.read(len(_PNG_SIGNATURE)) == _PNG_SIGNATURE:
                handle.seek(0)
                hits += _search(_png_text(handle.read()), needles, path, "png text", where)
                continue
            raw_needles = needles
            if _is_sqlite(path) or _is_sqlite_companion(path):
                raw_needles = [n for n in needles if not n[3]]
                word_needles = [n for n in needles if n[3]]
                if word_needles and _is_sqlite(path):
                    hits += _search_sqlite_values(path, word_needles, where)
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as blob:
                hits += _search(blob, raw_needles, path, "bytes", where)
    return hits
