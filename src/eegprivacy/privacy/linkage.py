"""Record linkage for study A: exact pseudonyms (GlobalID) and approximate Bloom-filter linkage.

Why both: a keyed pseudonym of the patient identifier links records across sites without revealing the identifier,
but a single typo or an un-normalised format breaks it. Bloom-filter encodings of the identifying fields (names,
date of birth, sex, postcode) tolerate typos; this module measures what each gains and loses on SYNTHETIC
identity tables, so no real person is ever needed to evaluate linkage quality.

GlobalID
    ``global_id(identifier, key)`` = hex HMAC-SHA256 under the linkage key over the UTF-8 bytes of
    ``canonical_identifier(identifier)``. Canonicalisation rules, applied in this order:

    1. Unicode NFKC normalisation (full-width digits and letters, ligatures, non-breaking spaces -> plain forms);
    2. ``str.casefold()`` (locale-free lower-casing, ``ß`` -> ``ss``);
    3. removal of every whitespace character (``str.isspace``), which also strips the ends;
    4. removal of the separators ``-`` ``_`` ``.`` ``/`` and of every other Unicode dash (category Pd, e.g. ``–``);
    5. an empty result raises ``ValueError`` (an empty identifier would give every such record one pseudonym).

    So ``"943 476 5919"``, ``"943-476-5919"`` and ``"９４３.４７６.５９１９"`` share one GlobalID; ``"9434765918"`` does not.
    Other characters are kept: canonicalisation fixes formatting, never content.

Keys
    There is no default key. :meth:`LinkageKey.from_env` reads a hex key from ``$EEGPRIVACY_LINKAGE_KEY`` or from
    the file named by ``$EEGPRIVACY_LINKAGE_KEY_FILE`` and raises :class:`MissingLinkageKeyError` otherwise, so a
    deployment that forgot its key fails instead of pseudonymising under a guessable one. A key file that group
    or others may access is refused (:class:`InsecureLinkageKeyFileError`): anyone who can read the key can
    recompute every GlobalID. A key never prints itself. :meth:`LinkageKey.for_synthetic_evaluation` derives a
    public key from a seed so the synthetic evaluation is deterministic; it protects nothing and must never touch
    real identifiers.

Bloom filters
    :class:`BloomEncoder` hashes the padded q-grams of each field into one ``num_bits`` filter per record (a
    cryptographic long-term key, CLK) by keyed double hashing: positions ``(h1 + i*h2) mod num_bits`` for
    ``i < num_hashes``, with ``h1`` and ``h2`` from HMAC-SHA256 under two sub-keys derived from the linkage key,
    over ``field salt || q-gram`` so a q-gram of one field never sets the bits of the same q-gram in another
    field. Records are compared by Dice similarity and linked one-to-one greedily above a threshold
    (:class:`BloomLinker`). Bloom encodings are *not* differentially private: frequency and pattern-mining attacks
    on them are published, so they lower exposure, they do not remove it.

Implementation choice: Data61's ``clkhash``/``anonlink`` were considered; their last releases are from 2023, and
clkhash 0.18 pins ``cryptography<41`` against this project's pin, so a small, tested implementation lives here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "KEY_ENV", "KEY_FILE_ENV", "MIN_KEY_BYTES", "IDENTITY_COLUMNS",
    "canonical_identifier", "MissingLinkageKeyError", "InsecureLinkageKeyFileError", "LinkageKey", "global_id",
    "exact_link",
    "normalise_date", "normalise_sex", "normalise_postcode", "BloomEncoder", "dice_similarity", "greedy_one_to_one", "BloomLinker",
    "synthetic_identity_table", "corrupt_identities", "linkage_scenario", "linkage_quality",
]

KEY_ENV = "EEGPRIVACY_LINKAGE_KEY"
KEY_FILE_ENV = "EEGPRIVACY_LINKAGE_KEY_FILE"
MIN_KEY_BYTES = 32
_KEY_HOWTO = ('create one with `python -c "import secrets; print(secrets.token_hex(32))" > linkage.key` '
              '(keep it out of the repository, chmod 600), then set {file_var}=/path/to/linkage.key or put the hex '
              'in {env_var}')

_SEPARATORS = frozenset("-_./")


# ------------------------------------------------------------------------------------------------------- GlobalID
def canonical_identifier(identifier: str) -> str:
    """The identifier with formatting removed (rules in the module docstring), so format variants share a GlobalID."""
    if not isinstance(identifier, str):
        raise TypeError(f"identifier must be str, got {type(identifier).__name__}")
    text = unicodedata.normalize("NFKC", identifier).casefold()
    canonical = "".join(ch for ch in text if not ch.isspace() and ch not in _SEPARATORS
                        and unicodedata.category(ch) != "Pd")
    if not canonical:
        raise ValueError("identifier is empty after canonicalisation (whitespace and separators only)")
    return canonical


class MissingLinkageKeyError(RuntimeError):
    """No linkage key was configured; there is deliberately no default to fall back on."""


class InsecureLinkageKeyFileError(MissingLinkageKeyError):
    """The key file is open to group or others, so the key cannot be trusted to be secret; it is not used."""


class LinkageKey:
    """A secret HMAC key (>= 32 bytes) that never shows its bytes in repr, str, logs or tracebacks."""

    __slots__ = ("_secret", "_synthetic")

    def __init__(self, secret: bytes, *, _synthetic: bool = False):
        if not isinstance(secret, (bytes, bytearray)):
            raise TypeError("a linkage key is bytes; use LinkageKey.from_hex for a hex string")
        if len(secret) < MIN_KEY_BYTES:
            raise ValueError(f"linkage key too short: {len(secret)} bytes, need at least {MIN_KEY_BYTES} "
                             "(secrets.token_hex(32) gives 32)")
        self._secret = bytes(secret)
        self._synthetic = bool(_synthetic)

    @classmethod
    def from_hex(cls, text: str) -> LinkageKey:
        """Key from hex text (surrounding whitespace ignored); the error never echoes the text."""
        try:
            secret = bytes.fromhex(text.strip())
        except ValueError:
            raise ValueError("linkage key is not valid hex (expected e.g. the output of secrets.token_hex(32))") \
                from None
        return cls(secret)

    @classmethod
    def from_env(cls, env_var: str = KEY_ENV, file_var: str = KEY_FILE_ENV) -> LinkageKey:
        """Key from ``$env_var`` (hex) or else from the file ``$file_var`` names; no default, by design."""
        howto = _KEY_HOWTO.format(env_var=env_var, file_var=file_var)
        value = os.environ.get(env_var, "").strip()
        if value:
            return cls.from_hex(value)
        path = os.environ.get(file_var, "").strip()
        if path:
            file = Path(path).expanduser()
            if not file.is_file():
                raise MissingLinkageKeyError(f"${file_var} names {file}, which is not a readable file; {howto}")
            mode = file.stat().st_mode & 0o777
            if os.name == "posix" and mode & 0o077:
                raise InsecureLinkageKeyFileError(
                    f"the linkage key file {file} is accessible to group or others (mode {mode:03o}); anyone who "
                    f"can read it can recompute every GlobalID. Make it owner-only with `chmod 600 {file}` (and "
                    "consider the key exposed if others could already read it)")
            text = file.read_text().strip()
            if not text:
                raise MissingLinkageKeyError(f"the linkage key file {file} is empty; {howto}")
            return cls.from_hex(text)
        raise MissingLinkageKeyError(f"no linkage key: neither ${env_var} nor ${file_var} is set, and there is no "
                                     f"default key; {howto}")

    @classmethod
    def for_synthetic_evaluation(cls, seed: int) -> LinkageKey:
        """A PUBLIC key derived from ``seed``, only for measuring linkage quality on synthetic identity tables.

        Anyone can recompute it, so it protects nothing; it exists so the evaluation stage is deterministic and
        needs no secret.
        """
        secret = hashlib.sha256(f"eegprivacy/synthetic-evaluation-linkage-key/v1/{int(seed)}".encode()).digest()
        return cls(secret, _synthetic=True)

    @property
    def synthetic(self) -> bool:
        """True for :meth:`for_synthetic_evaluation` keys."""
        return self._synthetic

    def derive(self, label: str) -> bytes:
        """A sub-key for one purpose (domain separation), so the Bloom hashes never reuse the GlobalID key."""
        return hmac.new(self._secret, f"eegprivacy/{label}".encode(), hashlib.sha256).digest()

    def __repr__(self) -> str:
        kind = "synthetic-evaluation key" if self._synthetic else "hidden"
        return f"LinkageKey(<{kind}, {len(self._secret)} bytes>)"

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, LinkageKey) and hmac.compare_digest(self._secret, other._secret)

    __hash__ = None  # keys are not dict keys: hashing them could leak through a cache


def global_id(identifier: str, key: LinkageKey) -> str:
    """Hex HMAC-SHA256 of the canonical identifier under ``key``: a pseudonym only the key holder can recompute."""
    if not isinstance(key, LinkageKey):
        raise TypeError("global_id needs a LinkageKey (see LinkageKey.from_env); there is no default key")
    return hmac.new(key._secret, canonical_identifier(identifier).encode("utf-8"), hashlib.sha256).hexdigest()


def exact_link(ids_a: Sequence[str], ids_b: Sequence[str]) -> list[tuple[int, int, float]]:
    """One-to-one links ``(i, j, 1.0)`` between equal pseudonyms (first occurrence wins on duplicates)."""
    first_b: dict[str, int] = {}
    for j, gid in enumerate(ids_b):
        first_b.setdefault(gid, j)
    matches, used = [], set()
    for i, gid in enumerate(ids_a):
        j = first_b.get(gid)
        if j is not None and j not in used:
            used.add(j)
            matches.append((i, j, 1.0))
    return matches


# ------------------------------------------------------------------------------------------------- Bloom filters
_DATE_PATTERNS = (
    (re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$"), ("y", "m", "d")),
    (re.compile(r"^(\d{1,2})[/.](\d{1,2})[/.](\d{4})$"), ("d", "m", "y")),  # day first, as European registries
    (re.compile(r"^(\d{4})(\d{2})(\d{2})$"), ("y", "m", "d")),
)


def normalise_date(value: str) -> str:
    """``yyyymmdd`` from ISO, ``dd/mm/yyyy``, ``dd.mm.yyyy`` or ``yyyymmdd``; anything else keeps only its digits.

    A typo can make a date unparseable, and its digits still carry most of the q-grams, hence the fallback.
    Slashed dates are read day first: mm/dd/yyyy sources need their own normaliser.
    """
    text = unicodedata.normalize("NFKC", str(value)).strip()
    for pattern, order in _DATE_PATTERNS:
        match = pattern.match(text)
        if match:
            parts = dict(zip(order, match.groups()))
            return f"{parts['y']}{int(parts['m']):02d}{int(parts['d']):02d}"
    return "".join(ch for ch in text if ch.isdigit())


def normalise_sex(value: str) -> str:
    """First letter, casefolded: ``F``, ``female``, `` f `` agree."""
    text = unicodedata.normalize("NFKC", str(value)).strip().casefold()
    return text[:1]


def normalise_postcode(value: str) -> str:
    """Alphanumerics only, casefolded: ``KT12 4RW`` and ``kt124rw`` agree (the space is formatting, not content)."""
    text = unicodedata.normalize("NFKC", str(value)).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def _normalise_text(value: str) -> str:
    """NFKC, casefold, and every run of non-alphanumerics -> one space (names, postcodes, free text)."""
    text = unicodedata.normalize("NFKC", str(value)).casefold()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text).split())


DEFAULT_NORMALISERS: dict[str, Callable[[str], str]] = {"date_of_birth": normalise_date, "sex": normalise_sex,
                                                         "postcode": normalise_postcode}


def _qgrams(text: str, q: int, pad: str = "_") -> set[str]:
    """Padded q-grams of each whitespace token, so token order does not matter and word ends carry weight."""
    grams: set[str] = set()
    for token in text.split():
        padded = pad * (q - 1) + token + pad * (q - 1)
        grams.update(padded[k:k + q] for k in range(len(padded) - q + 1))
    return grams


class BloomEncoder:
    """Keyed Bloom-filter (CLK) encoder of identity records; stateless, so :meth:`fit` only returns ``self``.

    ``fields`` lists column names; a tuple of columns is one field whose tokens share a salt, so values swapped
    between those columns (given and family name in the wrong boxes) still encode alike. ``normalisers`` maps a
    column to a function applied before tokenising (defaults: dates to ``yyyymmdd``, sex to its first letter;
    postcodes to their casefolded alphanumerics; other columns are casefolded and split on non-alphanumerics).
    Missing values set no bits.

    ``num_hashes=10`` keeps a filter about 30 % full for the ~35 bigrams of a name/date/sex/postcode record: more
    hashes minimise Bloom false positives but push the Dice of unrelated records up (≈0.56 at 20, ≈0.38 at 10 on
    the synthetic tables), shrinking the gap a threshold has to find.
    """

    def __init__(self, fields: Sequence[str | tuple[str, ...]], q: int = 2, num_bits: int = 1024,
                 num_hashes: int = 10, key: LinkageKey | None = None,
                 normalisers: Mapping[str, Callable[[str], str]] | None = None):
        if key is None:
            raise MissingLinkageKeyError("BloomEncoder needs a LinkageKey (LinkageKey.from_env(), or "
                                         "LinkageKey.for_synthetic_evaluation(seed) for synthetic tables only)")
        if not isinstance(key, LinkageKey):
            raise TypeError("key must be a LinkageKey")
        if int(q) < 1 or int(num_bits) < 8 or int(num_hashes) < 1:
            raise ValueError("need q >= 1, num_bits >= 8 and num_hashes >= 1")
        self.fields = [tuple(f) if isinstance(f, (tuple, list)) else (f,) for f in fields]
        if not self.fields:
            raise ValueError("BloomEncoder needs at least one field")
        self.q, self.num_bits, self.num_hashes = int(q), int(num_bits), int(num_hashes)
        self.normalisers = {**DEFAULT_NORMALISERS, **(normalisers or {})}
        self._k1, self._k2 = key.derive("bloom/h1"), key.derive("bloom/h2")
        self._positions: dict[bytes, np.ndarray] = {}  # (salt, q-gram) -> bit positions; q-grams repeat a lot
        self._field_cache: dict[tuple, np.ndarray] = {}

    def __repr__(self) -> str:
        return (f"BloomEncoder(fields={self.fields!r}, q={self.q}, num_bits={self.num_bits}, "
                f"num_hashes={self.num_hashes}, key=<hidden>)")

    def __reduce__(self):
        # it holds derived key material and caches keyed by plaintext identity values: never into a pickle,
        # a joblib cache or an artifact
        raise TypeError("a BloomEncoder holds key material and plaintext caches and cannot be pickled; "
                        "build one where the records are")

    def fit(self, records=None, y=None) -> BloomEncoder:
        return self

    def _bits(self, salt: str, gram: str) -> np.ndarray:
        message = f"{salt}\x00{gram}".encode()
        cached = self._positions.get(message)
        if cached is None:
            h1 = int.from_bytes(hmac.new(self._k1, message, hashlib.sha256).digest()[:8], "big")
            h2 = int.from_bytes(hmac.new(self._k2, message, hashlib.sha256).digest()[:8], "big")
            m = self.num_bits
            # a step coprime with a power-of-two width visits num_hashes distinct positions
            step = (h2 % m) | 1 if m & (m - 1) == 0 else 1 + h2 % (m - 1)
            cached = (h1 + np.arange(self.num_hashes, dtype=np.uint64) * np.uint64(step)) % np.uint64(m)
            cached = cached.astype(np.intp)
            self._positions[message] = cached
        return cached

    def _field_positions(self, group: tuple[str, ...], values: tuple) -> np.ndarray:
        """Bit positions of one field's value(s); cached, since names, sexes and postcodes repeat."""
        cache_key = (group, values)
        cached = self._field_cache.get(cache_key)
        if cached is None:
            tokens = [self.normalisers.get(column, _normalise_text)(value) for column, value in zip(group, values)
                      if not (value is None or (isinstance(value, float) and np.isnan(value)))]
            salt = "+".join(group)
            grams = sorted(_qgrams(" ".join(tokens), self.q))
            cached = (np.unique(np.concatenate([self._bits(salt, g) for g in grams])) if grams
                      else np.zeros(0, dtype=np.intp))
            if len(self._field_cache) < 1_000_000:
                self._field_cache[cache_key] = cached
        return cached

    def encode(self, records: pd.DataFrame | Iterable[Mapping]) -> np.ndarray:
        """Boolean ``(n_records, num_bits)`` filters, one row per record."""
        frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame.from_records(list(records))
        missing = sorted({c for group in self.fields for c in group} - set(frame.columns))
        if missing and len(frame):
            raise KeyError(f"records lack the field(s) {missing}")
        filters = np.zeros((len(frame), self.num_bits), dtype=bool)
        for group in self.fields:
            columns = [frame[c].tolist() for c in group] if len(frame) else []
            for n, values in enumerate(zip(*columns)):
                filters[n, self._field_positions(group, values)] = True
        return filters

    transform = encode

    def fit_transform(self, records, y=None) -> np.ndarray:
        return self.encode(records)


def dice_similarity(a: np.ndarray, b: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Dice coefficients ``2|A∩B| / (|A|+|B|)`` between every row of ``a`` and of ``b`` (0 when both are empty).

    Intersections come from a float32 product of the 0/1 matrices, exact for counts below 2**24, and far faster
    than pairwise popcounts in numpy; rows of ``a`` are processed in chunks to bound memory.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need two 2-D filter matrices of equal width, got {a.shape} and {b.shape}")
    fa, fb = a.astype(np.float32), b.astype(np.float32)
    count_a, count_b = fa.sum(axis=1), fb.sum(axis=1)
    out = np.empty((a.shape[0], b.shape[0]), dtype=np.float64)
    for start in range(0, a.shape[0], chunk):
        stop = start + chunk
        inter = fa[start:stop] @ fb.T
        total = count_a[start:stop, None] + count_b[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:stop] = np.where(total > 0, 2.0 * inter / total, 0.0)
    return out


def greedy_one_to_one(similarity: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """Pairs ``(i, j, score)`` at or above ``threshold``, best first, each record used at most once.

    Ties break on (i, j) so the result is deterministic. Greedy rather than optimal assignment: near-identical
    outcomes at usable thresholds, and it is what deployed PPRL linkers do. Because pairs are taken best first,
    the matches at a higher threshold are exactly the matches at a lower one whose score reaches it, so a threshold
    sweep needs one call.
    """
    similarity = np.asarray(similarity, dtype=float)
    rows, cols = np.nonzero(similarity >= threshold)
    scores = similarity[rows, cols]
    order = np.lexsort((cols, rows, -scores))
    used_a, used_b = set(), set()
    matches = []
    limit = min(similarity.shape)
    for i, j, score in zip(rows[order].tolist(), cols[order].tolist(), scores[order].tolist()):
        if i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        matches.append((i, j, score))
        if len(matches) == limit:
            break
    return matches


class BloomLinker:
    """Link two sets of Bloom filters: Dice similarity, then greedy one-to-one matching above ``threshold``."""

    def __init__(self, threshold: float = 0.8):
        if not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"a Dice threshold lies in [0, 1], got {threshold}")
        self.threshold = float(threshold)

    def __repr__(self) -> str:
        return f"BloomLinker(threshold={self.threshold})"

    def link(self, enc_a: np.ndarray, enc_b: np.ndarray) -> list[tuple[int, int, float]]:
        return greedy_one_to_one(dice_similarity(enc_a, enc_b), self.threshold)


# -------------------------------------------------------------------------------------- synthetic identity tables
IDENTITY_COLUMNS = ("national_id", "given_name", "family_name", "date_of_birth", "sex", "postcode")

# SYNTHETIC name lists: common names from many languages, combined at random, so no row describes a real person.
_GIVEN = {
    "F": ["Amelia", "Beatriz", "Chiara", "Daniela", "Elena", "Fatima", "Greta", "Hannah", "Ingrid", "Jasmine",
          "Katarina", "Leonie", "Margarida", "Nadia", "Olivia", "Priya", "Rebecca", "Sofia", "Theresa", "Valentina",
          "Yasmin", "Zofia", "Annika", "Charlotte", "Mariana"],
    "M": ["Alexander", "Benedikt", "Carlos", "Dimitri", "Emil", "Francesco", "Gabriel", "Henrik", "Ibrahim",
          "Johannes", "Kenji", "Lorenzo", "Matthias", "Nikolai", "Oliver", "Pedro", "Rafael", "Samuel", "Tobias",
          "Umberto", "Viktor", "William", "Xavier", "Yusuf", "Jonathan"],
}
_FAMILY = ["Andersson", "Bergmann", "Castellano", "Dubois", "Eriksen", "Fernandes", "Gallagher", "Hoffmann",
           "Ivanova", "Jankowski", "Kowalczyk", "Lindqvist", "Martinelli", "Novak", "Oliveira", "Petrovic",
           "Quintero", "Rasmussen", "Schneider", "Takahashi", "Underwood", "Vasquez", "Weber", "Yilmaz", "Zimmermann",
           "Albrecht", "Brennan", "Carvalho", "Delacroix", "Esposito", "Fitzgerald", "Gonzalez", "Hartmann",
           "Kristiansen", "Lombardi", "Moreau", "Nakamura", "Okonkwo", "Pellegrini", "Richter"]
_LETTERS = "ABCDEFGHJKLMNPRSTUWXYZ"


def _postcode(rng: np.random.Generator) -> str:
    area = "".join(rng.choice(list(_LETTERS), 2))
    return f"{area}{rng.integers(1, 30)} {rng.integers(1, 10)}{''.join(rng.choice(list(_LETTERS), 2))}"


def synthetic_identity_table(n: int, seed: int, household_rate: float = 0.2, n_postcodes: int | None = None,
                             birth_years: tuple[int, int] = (1930, 2010)) -> pd.DataFrame:
    """SYNTHETIC identity records (``record_id`` 0..n-1 plus IDENTITY_COLUMNS), clean and ISO-formatted.

    A share ``household_rate`` of records are relatives of an earlier one (same family name and postcode, other
    given name and birth date): the near-misses that make linkage precision something to measure. National ids
    are random, unique, 10-digit ``### ### ####`` strings with no check digit.
    """
    if n < 1:
        raise ValueError("need n >= 1 records")
    rng = np.random.default_rng([int(seed), 0x1D])
    n_postcodes = n_postcodes or max(10, n // 4)
    postcodes = [_postcode(rng) for _ in range(n_postcodes)]
    ids: set[int] = set()
    while len(ids) < n:
        ids.update(int(x) for x in rng.integers(1_000_000_000, 10_000_000_000, size=n - len(ids)))
    national = rng.permutation(sorted(ids))
    start = np.datetime64(f"{birth_years[0]}-01-01")
    days = (np.datetime64(f"{birth_years[1]}-12-31") - start).astype(int)
    records = []
    for r in range(n):
        sex = "F" if rng.random() < 0.5 else "M"
        if records and rng.random() < household_rate:
            relative = records[int(rng.integers(len(records)))]
            family, postcode = relative["family_name"], relative["postcode"]
        else:
            family, postcode = str(rng.choice(_FAMILY)), postcodes[int(rng.integers(n_postcodes))]
        digits = f"{national[r]:010d}"
        records.append({
            "record_id": r,
            "national_id": f"{digits[:3]} {digits[3:6]} {digits[6:]}",
            "given_name": str(rng.choice(_GIVEN[sex])),
            "family_name": family,
            "date_of_birth": str(start + np.timedelta64(int(rng.integers(days + 1)), "D")),
            "sex": sex,
            "postcode": postcode,
        })
    return pd.DataFrame.from_records(records)


def _typo(text: str, rng: np.random.Generator) -> str:
    """One edit (substitution, deletion, insertion or adjacent transposition) at an alphanumeric position, with a
    replacement of the same kind (digit for digit, letter for letter), so separators and formats survive."""
    positions = [k for k, ch in enumerate(text) if ch.isalnum()]
    if not positions:
        return text
    k = positions[int(rng.integers(len(positions)))]

    def same_kind(ch: str) -> str:
        if ch.isdigit():
            return str(rng.integers(10))
        letter = "abcdefghijklmnopqrstuvwxyz"[int(rng.integers(26))]
        return letter.upper() if ch.isupper() else letter

    op = ("substitute", "delete", "insert", "transpose")[int(rng.integers(4))]
    if op == "delete" and len(positions) > 1:
        return text[:k] + text[k + 1:]
    if op == "insert":
        return text[:k + 1] + same_kind(text[k]) + text[k + 1:]
    if op == "transpose" and k + 1 < len(text) and text[k + 1].isalnum() and text[k + 1] != text[k]:
        return text[:k] + text[k + 1] + text[k] + text[k + 2:]
    replacement = same_kind(text[k])
    while replacement.casefold() == text[k].casefold():
        replacement = same_kind(text[k])
    return text[:k] + replacement + text[k + 1:]


def _reformat_date(iso: str, rng: np.random.Generator) -> str:
    parts = iso.split("-")
    if len(parts) != 3:
        return iso
    y, m, d = parts
    return (f"{d}/{m}/{y}", f"{d}.{m}.{y}", f"{y}{m}{d}")[int(rng.integers(3))]


def _reformat_id(value: str, rng: np.random.Generator) -> str:
    digits = value.replace(" ", "")
    if len(digits) != 10:
        return f" {value} "
    a, b, c = digits[:3], digits[3:6], digits[6:]
    return (digits, f"{a}-{b}-{c}", f"{a}.{b}.{c}", f" {a} {b} {c} ")[int(rng.integers(4))]


def _recase(value: str, rng: np.random.Generator) -> str:
    return (value.upper(), value.lower(), f"  {value} ")[int(rng.integers(3))]


TYPO_FIELDS = ("national_id", "given_name", "family_name", "date_of_birth", "postcode")


def corrupt_identities(table: pd.DataFrame, seed: int, typo_rate: float, format_rate: float) -> pd.DataFrame:
    """A re-keyed copy as a second site would hold it: typos and formatting variants, ``record_id`` kept for scoring.

    Each field of TYPO_FIELDS independently gets one typo (see ``_typo``) with probability ``typo_rate``. Each
    formatting variant is applied independently with probability ``format_rate``: names re-cased or padded with
    whitespace, given and family name swapped, the date written ``dd/mm/yyyy``, ``dd.mm.yyyy`` or ``yyyymmdd``,
    the national id with other separators, the postcode lower-cased without its space, sex spelled out.
    """
    for name, rate in (("typo_rate", typo_rate), ("format_rate", format_rate)):
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {rate}")
    rng = np.random.default_rng([int(seed), 0xC0])
    out = table.copy()
    records = out.to_dict("records")
    for record in records:
        for field in TYPO_FIELDS:
            if rng.random() < typo_rate:
                record[field] = _typo(str(record[field]), rng)
        if rng.random() < format_rate:
            record["given_name"] = _recase(record["given_name"], rng)
        if rng.random() < format_rate:
            record["family_name"] = _recase(record["family_name"], rng)
        if rng.random() < format_rate:
            record["given_name"], record["family_name"] = record["family_name"], record["given_name"]
        if rng.random() < format_rate:
            record["date_of_birth"] = _reformat_date(record["date_of_birth"], rng)
        if rng.random() < format_rate:
            record["national_id"] = _reformat_id(record["national_id"], rng)
        if rng.random() < format_rate:
            record["postcode"] = record["postcode"].replace(" ", "").lower()
        if rng.random() < format_rate:
            record["sex"] = {"F": "female", "M": "male"}.get(record["sex"], record["sex"])
    return pd.DataFrame.from_records(records, columns=table.columns)


def linkage_scenario(n: int, seed: int, typo_rate: float, format_rate: float, overlap: float = 0.8,
                     household_rate: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame, set[tuple[int, int]]]:
    """Two SYNTHETIC sites: A holds ``n`` clean records; B holds corrupted copies of ``overlap``·n of them plus
    people A never saw, shuffled. Returns (A, B, true pairs (row in A, row in B)).

    The non-overlapping records are what make precision informative: a linker that links everything is wrong
    on them. Both sites' people come from one population, so A's relatives can appear in B.
    """
    if not 0.0 < overlap <= 1.0:
        raise ValueError(f"overlap must lie in (0, 1], got {overlap}")
    n_shared = int(round(overlap * n))
    population = synthetic_identity_table(n + (n - n_shared), seed, household_rate=household_rate)
    rng = np.random.default_rng([int(seed), 0xB0])
    order = rng.permutation(len(population))
    site_a = population.iloc[np.sort(order[:n])].reset_index(drop=True)
    shared = site_a.iloc[rng.choice(n, size=n_shared, replace=False)]
    others = population.iloc[order[n:]]
    site_b = pd.concat([shared, others]).sample(frac=1.0, random_state=rng.integers(2**31)).reset_index(drop=True)
    site_b = corrupt_identities(site_b, seed, typo_rate, format_rate)
    row_a = {rid: i for i, rid in enumerate(site_a["record_id"])}
    truth = {(row_a[rid], j) for j, rid in enumerate(site_b["record_id"]) if rid in row_a}
    return site_a, site_b, truth


def linkage_quality(matches: Iterable[Sequence], truth: Iterable[tuple[int, int]]) -> dict[str, float]:
    """Precision, recall and F1 of predicted pairs ``(i, j[, score])`` against the true pairs.

    Precision is nan without predictions and recall nan without true pairs (nothing to measure), not 0 or 1.
    """
    predicted = {(int(m[0]), int(m[1])) for m in matches}
    true = {(int(i), int(j)) for i, j in truth}
    hits = len(predicted & true)
    precision = hits / len(predicted) if predicted else float("nan")
    recall = hits / len(true) if true else float("nan")
    if np.isnan(precision) or np.isnan(recall):
        f1 = float("nan")
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1), "n_true": len(true),
            "n_predicted": len(predicted), "true_positives": hits}
