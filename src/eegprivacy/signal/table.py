"""Window-feature tables: dataset -> one row per 2-s window, ``<channel>:<feature>`` columns.

Computed once per (dataset version, feature config) and stored as parquet whose schema metadata records both,
so every study reads the same table and a stale file is never reused silently.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import mne
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from eegprivacy.atomic import atomic_path
from eegprivacy.data.base import DataQualityWarning, LeftOut
from eegprivacy.data.clinical_folder import RecordingReadError
from eegprivacy.errors import InputDataError, InvalidInputError
from eegprivacy.params import Config, ParamsError, param
from eegprivacy.signal.features import FeatureConfig, feature_columns, window_features
from eegprivacy.signal.preprocess import PreprocessConfig, min_samples, preprocess_raw
from eegprivacy.signal.windows import WindowConfig, sliding_windows
from eegprivacy.validation import InstanceOf

MAPPING = InstanceOf((dict,), text="a mapping of settings")

log = logging.getLogger(__name__)

# Row-identifying columns that precede the feature columns.
INDEX_COLUMNS = ["dataset", "subject", "recording", "condition", "label", "window", "t_start", "sfreq", "flags"]


@dataclass(frozen=True)
class FeaturePipelineConfig:
    """Everything that determines the numbers in a window-feature table."""

    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    window: WindowConfig = field(default_factory=WindowConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)

    @classmethod
    def from_params(cls, params: dict) -> FeaturePipelineConfig:
        """Build from the ``features`` block of ``params/features.yaml``."""
        return cls(PreprocessConfig(**params.get("preprocess", {})), WindowConfig(**params.get("window", {})),
                   FeatureConfig(**params.get("welch", {})))

    def to_dict(self) -> dict:
        return {"preprocess": self.preprocess.to_dict(), "window": self.window.to_dict(),
                "features": self.features.to_dict()}

    def config_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]


# The blocks of the ``features`` section that build a FeaturePipelineConfig, and that a dataset may override.
PIPELINE_BLOCKS = ("preprocess", "window", "welch")


@dataclass(frozen=True)
class FeaturesParams(Config):
    """``features`` of ``params/features.yaml``: the typed section behind :class:`FeaturePipelineConfig`, plus
    each dataset's constructor arguments. The blocks are checked by the config dataclasses they build.

    ``per_dataset`` holds partial overrides of the shared blocks for one dataset, e.g. a lower low-pass and
    bands below Nyquist for a 128-Hz cohort. Each key given replaces the shared one (a ``bands`` mapping is
    replaced whole, so a dataset names all its bands); a dataset without an entry gets the shared blocks as they
    are, so its config and config hash do not change when another dataset's entry is added.
    """

    preprocess: dict = param(MAPPING, default={}, doc="band-pass, notch and reference (PreprocessConfig)")
    window: dict = param(MAPPING, default={}, doc="window length and overlap (WindowConfig)")
    welch: dict = param(MAPPING, default={}, doc="Welch PSD set-up and bands (FeatureConfig)")
    datasets: dict = param(MAPPING, default={}, doc="constructor arguments per dataset")
    per_dataset: dict = param(MAPPING, default={}, doc="per dataset, partial overrides of preprocess, window, welch")

    def check(self, source, prefix) -> None:
        def built(name, where):
            try:
                self.pipeline(name)
            except (TypeError, ValueError) as err:
                raise ParamsError(f"{source}: {where}: {err}. Fix it in {source} (nothing was computed or "
                                  "written)") from err

        built(None, prefix.rstrip("."))
        for name, kwargs in self.datasets.items():
            if kwargs is not None and not isinstance(kwargs, dict):
                raise ParamsError(f"{source}: {prefix}datasets.{name} must be a mapping of constructor arguments")
        for name, blocks in self.per_dataset.items():
            where = f"{prefix}per_dataset.{name}"
            if name not in self.datasets:
                raise ParamsError(f"{source}: {where}: {name!r} is not a dataset of {prefix}datasets "
                                  f"({', '.join(sorted(self.datasets)) or 'none'}); fix the name or list the "
                                  f"dataset under {prefix}datasets")
            if blocks is not None and not isinstance(blocks, dict):
                raise ParamsError(f"{source}: {where} must be a mapping of blocks "
                                  f"({', '.join(PIPELINE_BLOCKS)}), not {blocks!r}")
            for block, settings in (blocks or {}).items():
                if block not in PIPELINE_BLOCKS:
                    raise ParamsError(f"{source}: unknown block {where}.{block}; a dataset overrides "
                                      f"{', '.join(PIPELINE_BLOCKS)} (bands go in welch)")
                if settings is not None and not isinstance(settings, dict):
                    raise ParamsError(f"{source}: {where}.{block} must be a mapping of settings, not {settings!r}")
            built(name, where)

    def pipeline(self, dataset: str | None = None) -> FeaturePipelineConfig:
        """The feature config of ``dataset``: the shared blocks with its ``per_dataset`` overrides merged over
        them (the shared config when it has none, or when ``dataset`` is None)."""
        override = (self.per_dataset.get(dataset) or {}) if dataset is not None else {}
        return FeaturePipelineConfig.from_params(
            {block: {**getattr(self, block), **(override.get(block) or {})} for block in PIPELINE_BLOCKS})

    def dataset_kwargs(self, name: str) -> dict:
        """Constructor arguments of dataset ``name`` ({} when the params name none)."""
        return dict(self.datasets.get(name) or {})


def recording_features(raw, config: FeaturePipelineConfig) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """One recording -> (features (n_windows, n_channels*11), window starts (s), channel names, flags)."""
    sfreq = float(raw.info["sfreq"])
    channels = [raw.ch_names[i] for i in mne.pick_types(raw.info, eeg=True, exclude=())]  # preprocess_raw's picks
    data, flags = preprocess_raw(raw, config.preprocess)
    windows, starts = sliding_windows(data, sfreq, config.window)
    if len(windows) == 0:
        n_columns = len(channels) * len(config.features.feature_names)
        return np.empty((0, n_columns)), starts, channels, [*flags, "no_complete_window"]
    feats, feat_flags = window_features(windows, sfreq, config.features)
    return feats.reshape(len(feats), -1), starts, channels, sorted(set(flags) | set(feat_flags))


# A channel whose peak-to-peak over the whole recording is below this (volts) carries no EEG: a disconnected
# electrode or a zero-filled export. 0.1 µV is far under any real scalp signal and above float noise.
FLAT_PTP_V = 1e-7


class NonFiniteSamplesError(InputDataError, ValueError):
    """A recording holds NaN or infinite samples, which no filter can run over."""


@dataclass
class _Survey:
    """What the channel plan needs from one recording: from its metadata until it is loaded, then from the data."""

    channels: list[str]
    flat: list[str]
    sfreq: float
    n_times: int
    short: bool
    left_out: bool = False  # could not be used (unreadable, NaN samples) and skipped: out of the channel plan

    @property
    def usable(self) -> bool:
        return not (self.short or self.left_out)


def _too_short(n_times: int, sfreq: float, config: FeaturePipelineConfig) -> bool:
    return n_times < max(min_samples(sfreq, config.preprocess), config.window.samples(sfreq)[0])


def _planned(rec, config: FeaturePipelineConfig) -> _Survey | None:
    """The survey the metadata promises (channels, rate, duration; nothing is flat yet), or None without them."""
    channels, sfreq, duration = (rec.meta.get(k) for k in ("channels", "sfreq", "duration_s"))
    if any(v is None or (not isinstance(v, str) and pd.isna(v)) for v in (channels, sfreq, duration)) or not channels:
        return None
    n_times = int(round(float(duration) * float(sfreq)))
    return _Survey(str(channels).split(","), [], float(sfreq), n_times, _too_short(n_times, float(sfreq), config))


def _loaded(rec, config: FeaturePipelineConfig):
    """(the recording's Raw with its data read, its survey); a file no reader can open is a
    :class:`RecordingReadError` naming it, NaN samples a :class:`NonFiniteSamplesError`."""
    try:
        raw = rec.load().load_data(verbose="error")
    except InputDataError:
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure becomes one error naming the file
        raise RecordingReadError(f"cannot read {rec.describe()} ({type(err).__name__}: {err}); copy or export the "
                                 "recording again, or remove it") from err
    return raw, _survey(rec, raw, config)


def _survey(rec, raw, config: FeaturePipelineConfig) -> _Survey:
    """The survey of a loaded recording; NaN or infinite samples are an error that names its file."""
    picks = mne.pick_types(raw.info, eeg=True, exclude=())
    channels = [raw.ch_names[i] for i in picks]
    sfreq, n_times = float(raw.info["sfreq"]), int(raw.n_times)
    if not channels:
        raise InvalidInputError(f"{rec.describe()} has no EEG channels")
    data = raw.get_data(picks=picks)
    finite = np.isfinite(data)
    if not finite.all():
        bad = [c for c, ok in zip(channels, finite.all(axis=1)) if not ok]
        raise NonFiniteSamplesError(
            f"{rec.describe()}: {int((~finite).sum())} NaN/infinite sample(s) in channel(s) {', '.join(bad[:10])}"
            f"{' …' if len(bad) > 10 else ''}; filters cannot run over gaps. Interpolate or cut those samples in "
            "the file, or remove the recording (in a clinical folder: its row in metadata.csv)")
    flat = [c for c, ptp in zip(channels, np.ptp(data, axis=1)) if ptp < FLAT_PTP_V]
    return _Survey(channels, flat, sfreq, n_times, _too_short(n_times, sfreq, config))


def _channel_plan(recordings, surveys: list[_Survey]) -> tuple[list[str], dict[int, list[str]]]:
    """The channels every usable recording has and none has flat, in the first one's order; and per recording the
    flags that say why its own channel set differs (``missing_channel``, ``dropped_channel``, ``flat_channel``).

    A channel held by at least half the recordings but absent from some is *missing* there; one held by fewer is
    *dropped* where it exists. Either way it leaves the table, so all rows share one channel set and one average
    reference, whatever order the recordings come in.
    """
    usable = [i for i, s in enumerate(surveys) if s.usable]
    counts: dict[str, int] = {}
    for i in usable:
        for ch in surveys[i].channels:
            counts[ch] = counts.get(ch, 0) + 1
    flat = {ch for i in usable for ch in surveys[i].flat}
    common = {ch for ch, n in counts.items() if n == len(usable)}
    kept = [ch for ch in surveys[usable[0]].channels if ch in common and ch not in flat]
    flags: dict[int, list[str]] = {}
    for i in usable:
        own = set(surveys[i].channels)
        mine = [f"flat_channel:{ch}" for ch in surveys[i].flat]
        mine += [f"missing_channel:{ch}" for ch in sorted(set(counts) - own) if 2 * counts[ch] >= len(usable)]
        mine += [f"dropped_channel:{ch}" for ch in sorted(own - common) if 2 * counts[ch] < len(usable)]
        if mine:
            flags[i] = mine
    if not kept:
        first = usable[0]
        reference = set(surveys[first].channels)
        disjoint = [recordings[i].describe() for i in usable if not reference & set(surveys[i].channels)]
        why = (f"{'; '.join(disjoint[:3])} share(s) none of them" if disjoint
               else f"those in all recordings are flat somewhere ({', '.join(sorted(common & flat)[:12])})"
               if common else "no channel is in all recordings")
        raise ValueError(
            f"no EEG channel is present and non-flat in every recording of {recordings[first].dataset}: "
            f"{recordings[first].describe()} has {', '.join(surveys[first].channels[:12])}; {why}. Rename channels "
            "to their 10-05 labels, or leave out the recordings that do not match")
    return kept, flags


def _warn_plan(dataset, recordings, surveys: list[_Survey], kept: list[str], flags: dict[int, list[str]]) -> None:
    """One warning per kind of recovery, naming recordings by their identifier-free locator."""
    def where(indices):
        names = [recordings[i].locate() for i in indices]
        return "; ".join(names[:5]) + (f"; and {len(names) - 5} more" if len(names) > 5 else "")

    short = [i for i, s in enumerate(surveys) if s.short and not s.left_out]
    if short:
        warnings.warn(f"{dataset.name}: {len(short)} recording(s) are shorter than the band-pass filter plus one "
                      f"window need ({where(short)}); they contribute no windows. Lower features.preprocess.l_freq "
                      "(a shorter filter) or leave them out", DataQualityWarning, stacklevel=3)
        kept_subjects = {recordings[i].subject for i, s in enumerate(surveys) if s.usable}
        lost = {recordings[i].subject for i in short} - kept_subjects
        if lost:
            warnings.warn(f"{dataset.name}: {len(lost)} subject(s) have no recording long enough and are not in the "
                          "table", DataQualityWarning, stacklevel=3)
    for kind, what in (("flat_channel", f"flat (peak-to-peak under {FLAT_PTP_V * 1e6:g} µV)"),
                       ("missing_channel", "missing"), ("dropped_channel", "present in too few recordings")):
        hit = {i: [f.split(":", 1)[1] for f in fl if f.startswith(kind + ":")] for i, fl in flags.items()}
        hit = {i: chs for i, chs in hit.items() if chs}
        if hit:
            channels = sorted({c for chs in hit.values() for c in chs})
            warnings.warn(f"{dataset.name}: channel(s) {', '.join(channels)} {what} in {len(hit)} recording(s) "
                          f"({where(hit)}); left out of every recording so all rows share one channel set "
                          f"({len(kept)} channels kept). Their rows are flagged '{kind}:<channel>'",
                          DataQualityWarning, stacklevel=3)
    rates = sorted({s.sfreq for s in surveys if s.usable})
    if len(rates) > 1:
        log.info("%s: recordings at %d sampling rates (%s Hz); each is filtered, windowed and analysed at its own "
                 "rate (column 'sfreq')", dataset.name, len(rates), ", ".join(f"{r:g}" for r in rates))


def dataset_window_features(dataset, config: FeaturePipelineConfig, progress: bool = True,
                            on_recording=None, skip_bad: bool = False, on_left_out=None) -> pd.DataFrame:
    """All recordings of ``dataset`` -> tidy window-feature table, one channel set for all rows.

    Bad input is met as follows: a recording that cannot be read (NaN/infinite samples, a file no reader opens) is
    an error naming the file, or with ``skip_bad`` is left out with one :class:`DataQualityWarning` naming the
    file and the reason; a recording shorter than the band-pass filter plus one window is skipped; a channel
    missing from, or flat in, any recording is left out of all of them (:func:`_channel_plan`), so every row has
    the same columns and average reference. Each recovery is flagged on the rows of the recordings concerned and
    reported by one :class:`DataQualityWarning`. ``on_left_out(LeftOut)``, if given, is called for each recording
    that contributes no row (skipped as bad, or too short), so a caller can list them.

    The channel plan starts from the metadata (channels, rate, duration) and is corrected as each recording is
    loaded (a flat channel only shows in the data); recordings computed under an earlier plan are computed again,
    so clean data is read once and the result never depends on recording order. ``on_recording()``, if given, is
    called after each recording is read (a caller's overall progress bar).
    """
    recordings = dataset.recordings()
    if not recordings:
        raise InvalidInputError(f"dataset {dataset.name} has no recordings")

    def leave_out(i: int, err: InputDataError) -> None:
        surveys[i] = _Survey([], [], surveys[i].sfreq if surveys[i] else 0.0, 0, False, left_out=True)
        warnings.warn(f"{err}; left out", DataQualityWarning, stacklevel=3)
        if on_left_out is not None:
            on_left_out(LeftOut(recordings[i].subject, recordings[i].source or recordings[i].describe(), str(err)))

    surveys: list[_Survey | None] = [_planned(rec, config) for rec in recordings]
    for i, rec in enumerate(recordings):
        if surveys[i] is None:  # no metadata to plan from: read it now
            try:
                surveys[i] = _loaded(rec, config)[1]
            except InputDataError as err:
                if not skip_bad:
                    raise
                leave_out(i, err)
    if all(s.short for s in surveys if not s.left_out) and any(not s.left_out for s in surveys):
        longest = max((s for s in surveys if not s.left_out), key=lambda s: s.n_times / s.sfreq)
        raise InvalidInputError(f"every recording of {dataset.name} is too short for the band-pass filter plus one "
                                f"window (the longest is {longest.n_times / longest.sfreq:.2f} s at "
                                f"{longest.sfreq:g} Hz); lower features.preprocess.l_freq or use longer recordings")

    def compute(i: int, raw) -> tuple[list[str], pd.DataFrame]:
        eeg = [raw.ch_names[j] for j in mne.pick_types(raw.info, eeg=True, exclude=())]
        if eeg != kept:
            raw = raw.copy().pick(kept)
        return list(kept), _recording_frame(dataset, recordings[i], raw, kept, config)

    kept: list[str] = []
    frames: dict[int, tuple[list[str], pd.DataFrame]] = {}
    for i, rec in enumerate(tqdm(recordings, desc=f"features {dataset.name}", unit="rec", disable=not progress)):
        if not surveys[i].usable:
            if on_recording is not None:
                on_recording()
            continue
        try:
            raw, surveys[i] = _loaded(rec, config)
        except InputDataError as err:
            if not skip_bad:
                raise
            leave_out(i, err)
        else:
            if surveys[i].usable:
                kept, _ = _channel_plan(recordings, surveys)
                frames[i] = compute(i, raw)
        if on_recording is not None:
            on_recording()
    if not frames:
        raise InvalidInputError(f"no recording of {dataset.name} could be used: every one was left out (the "
                                "warnings above name each file and why)")
    kept, plan_flags = _channel_plan(recordings, surveys)
    for i in sorted(frames):
        if frames[i][0] != kept:  # computed before a later recording changed the plan
            frames[i] = compute(i, recordings[i].load())
    _warn_plan(dataset, recordings, surveys, kept, plan_flags)
    if on_left_out is not None:
        for i, survey in enumerate(surveys):
            if survey.short and not survey.left_out:
                on_left_out(LeftOut(recordings[i].subject, recordings[i].source or recordings[i].describe(),
                                    f"{recordings[i].locate()}: {survey.n_times / survey.sfreq:.2f} s, shorter than "
                                    "the band-pass filter plus one window need", unusable=False))
    out = []
    for i in sorted(frames):
        frame = frames[i][1]
        extra = plan_flags.get(i, [])
        if extra:
            frame["flags"] = [";".join(sorted({*filter(None, cell.split(";")), *extra})) for cell in frame["flags"]]
        out.append(frame)
    return pd.concat(out, ignore_index=True)


def _recording_frame(dataset, rec, raw, channels: list[str], config: FeaturePipelineConfig) -> pd.DataFrame:
    feats, starts, _, flags = recording_features(raw, config)
    meta_flags = [f for f in str(rec.meta.get("flags") or "").split(";") if f]
    frame = pd.DataFrame(feats, columns=feature_columns(channels, config.features))
    frame.insert(0, "dataset", dataset.name)
    frame.insert(1, "subject", rec.subject)
    frame.insert(2, "recording", rec.recording)
    frame.insert(3, "condition", rec.meta.get("condition"))
    frame.insert(4, "label", rec.meta.get("label"))
    frame.insert(5, "window", np.arange(len(feats)))
    frame.insert(6, "t_start", starts[: len(feats)])
    frame.insert(7, "sfreq", float(raw.info["sfreq"]))
    frame.insert(8, "flags", ";".join(sorted(set(meta_flags) | set(flags))))
    return frame


def write_feature_table(table: pd.DataFrame, path: str | Path, *, dataset_version: str,
                        config: FeaturePipelineConfig, synthetic: bool) -> Path:
    """Write parquet atomically, stamping dataset version, config hash and the synthetic flag in its metadata."""
    path = Path(path)
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    meta = dict(arrow.schema.metadata or {})
    meta.update({b"eegprivacy.dataset_version": dataset_version.encode(),
                 b"eegprivacy.config_hash": config.config_hash().encode(),
                 b"eegprivacy.config": json.dumps(config.to_dict(), default=str).encode(),
                 b"eegprivacy.synthetic": str(bool(synthetic)).lower().encode()})
    with atomic_path(path) as tmp:
        pq.write_table(arrow.replace_schema_metadata(meta), tmp)
    return path


def table_stamp(path: str | Path) -> dict[str, str]:
    """The provenance stamp of a feature table, or {} when there is no file."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        meta = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError) as err:
        raise ValueError(f"{path} is not a readable parquet feature table ({err}); delete it or rerun the features "
                         "stage with --force") from err
    return {k.decode().removeprefix("eegprivacy."): v.decode() for k, v in meta.items()
            if k.startswith(b"eegprivacy.")}


def read_feature_table(path: str | Path, *, dataset_version: str | None = None,
                       config: FeaturePipelineConfig | None = None) -> pd.DataFrame:
    """Read a stored table, refusing one computed from another dataset version or feature config."""
    stamp = table_stamp(path)
    if not stamp:
        raise FileNotFoundError(f"no feature table at {path}; run `dvc repro features` or `eegprivacy features`")
    if dataset_version and stamp.get("dataset_version") != dataset_version:
        raise ValueError(f"{path} was computed from dataset version {stamp.get('dataset_version')[:12]}, "
                         f"not {dataset_version[:12]}; recompute it")
    if config and stamp.get("config_hash") != config.config_hash():
        raise ValueError(f"{path} was computed with another feature config; recompute it")
    return pd.read_parquet(path)


def is_current(path: str | Path, dataset_version: str, config: FeaturePipelineConfig) -> bool:
    """Whether the stored table was computed from this data and config; an unreadable file is not current."""
    try:
        stamp = table_stamp(path)
    except ValueError:
        return False
    return stamp.get("dataset_version") == dataset_version and stamp.get("config_hash") == config.config_hash()
