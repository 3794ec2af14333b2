"""The common shape of a stage script (``experiments/<stage>.py``: params → parent run → cells → outputs), once.

A stage script declares its own flags in ``add_arguments(parser)`` and does its work in ``run(args)``; the registry
(:mod:`eegprivacy.pipeline.stages`) adds the shared flags (``--params``, ``--dataset``, ``--cells``, ...) and reads
the stage's typed params into ``args.config``. What the scripts would otherwise each write again lives here, so a
script states only what differs:

- flags: the params files holding other stages' sections it reads (:func:`add_params_flags`), its worker
  processes (:func:`add_jobs_flag`), its output files under their conventional names (:func:`add_output_flags`;
  a per-dataset sweep with a headline, :func:`add_headline_flags` with :func:`headline_paths`);
- params: the dataset it is asked to run on must be listed where its settings are read (:func:`require_listed`);
  other stages' sections read from the file a flag names, by the registry's section of each typed config
  (:func:`read_sections`; as one dataset runs it, :func:`dataset_section`; one dataset's entry, checked,
  :func:`dataset_entry`); what every cell carries besides its grid values (:func:`cell_base`);
- MLflow: the required tags of the stage's runs bound once, the seed and extras given per run (:func:`stage_tags`),
  a sweep's parent run with one child per cell (:func:`sweep_runner`; the cells computed ahead by
  :func:`~eegprivacy.pipeline.sweep.iter_prefetched`, those cached without their arrays dropped first by
  :func:`drop_cells_without_arrays`), a one-off run holding a summary (:func:`log_run`,
  :func:`log_dataset_run`);
- outputs: folders made for writers that open their file themselves (:func:`output_paths`), a CSV or JSON written
  atomically (:func:`write_csv`, :func:`write_json_file`), an interval printed from a summary entry
  (:func:`interval_text`).

Nothing here computes a number: the files, MLflow runs, tags and ``--help`` of a stage are those its script made
before it used these.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from eegprivacy.atomic import atomic_path, write_text_atomic
from eegprivacy.pipeline.sweep import SweepRunner
from eegprivacy.tracking.runs import log_artifact, log_metrics, required_tags, start_run

# ---- Flags ----------------------------------------------------------------------------------------------------
# ``--<name>-params``: the file holding the sections of another stage that a stage reads (so both cannot drift).
PARAMS_FILES = {"release": "params/dp_release.yaml", "scaling": "params/dp_scaling.yaml",
                "designs": "params/dp_end_to_end.yaml", "training": "params/federated_mia.yaml",
                "control": "params/federated_control.yaml"}
JOBS_HELP = "processes computing cells ahead (results do not depend on it)"
PURE_CELLS = ": each cell is a pure function of its config and seed"
# Output flags by name: the default path, formatted with the stage's file stem.
OUTPUT_DEFAULTS = {"out": "metrics/{}.csv", "json": "metrics/{}.json", "summary": "metrics/{}.json",
                   "report": "reports/{}.md", "figure": "reports/figures/{}.png"}


def add_params_flags(parser, **helps: str) -> None:
    """``--<name>-params`` for each keyword, in order (``release``, ``scaling``, ``designs``, ``training``,
    ``control``: the file in :data:`PARAMS_FILES` is its default), with the stage's own help saying what it reads
    there."""
    for name, help_text in helps.items():
        parser.add_argument(f"--{name}-params", default=PARAMS_FILES[name], help=help_text)


def workers_help(unit: str = "cells", detail: str = "") -> str:
    """The ``--jobs`` help of a stage whose worker processes compute ``unit`` ahead."""
    return f"worker processes computing {unit} ahead (default: min(2, CPUs)); the numbers do not depend on it{detail}"


def add_jobs_flag(parser, help_text: str = JOBS_HELP) -> None:
    """``--jobs``: how many processes compute cells ahead (default: min(2, CPUs)); never changes a number."""
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help=help_text)


def add_output_flags(parser, stem: str, **flags: str | None | tuple[str, str | None]) -> None:
    """One ``--<name>`` per keyword, in order: its help (None: none), or (default, help) where the default is not
    :data:`OUTPUT_DEFAULTS`' path for ``name`` with ``stem`` (``out``: ``metrics/<stem>.csv``, ...)."""
    for name, spec in flags.items():
        default, help_text = spec if isinstance(spec, tuple) else (OUTPUT_DEFAULTS[name].format(stem), spec)
        parser.add_argument(f"--{name}", default=default, help=help_text)


def add_headline_flags(parser, stem: str) -> None:
    """The flags of a per-dataset sweep stage with a headline: ``--metrics`` (headline JSON) and ``--figure``, named
    after the dataset unless given (:func:`headline_paths`), and ``--jobs`` (:func:`add_jobs_flag`)."""
    parser.add_argument("--metrics", help=f"headline JSON (default metrics/{stem}_<dataset>.json)")
    parser.add_argument("--figure", help=f"figure (default reports/figures/{stem}_<dataset>.png)")
    add_jobs_flag(parser)


def headline_paths(args, stem: str) -> tuple[str, str, str]:
    """``--out``, ``--metrics`` and ``--figure`` of a per-dataset stage, each its ``<stem>_<dataset>`` default
    where not given."""
    dataset = args.dataset
    return (args.out or f"metrics/{stem}_{dataset}.csv", args.metrics or f"metrics/{stem}_{dataset}.json",
            args.figure or f"reports/figures/{stem}_{dataset}.png")


# ---- Params ---------------------------------------------------------------------------------------------------
def section_of(config_type: type) -> str:
    """The params section ``config_type`` is read from: that of the registered stages whose typed config it is."""
    from eegprivacy.pipeline.stages import STAGES

    name = f"{config_type.__module__}:{config_type.__qualname__}"
    sections = {stage.section for stage in STAGES if stage.config == name}
    if len(sections) != 1:
        raise LookupError(f"{name} is the config of {len(sections)} registered params sections, not of one")
    return sections.pop()


def read_sections(path: str | Path, *config_types: type) -> tuple:
    """Each of ``config_types`` read from its section (:func:`section_of`) of the params file ``path``: the sections
    of other stages a stage reads (from the file its ``--<name>-params`` flag names), checked on load."""
    return tuple(config_type.load(path, section_of(config_type)) for config_type in config_types)


def read_section(path: str | Path, config_type: type):
    """One section, as :func:`read_sections` reads it."""
    return config_type.load(path, section_of(config_type))


def dataset_section(config_type: type, path: str | Path, dataset: str) -> tuple[Any, Any]:
    """:func:`read_section` as ``dataset`` runs it, its per-dataset overrides applied (``for_dataset``), and the
    dataset's spec there (``dataset_spec``)."""
    params = read_section(path, config_type).for_dataset(dataset, path)
    return params, params.dataset_spec(dataset, path)


def require_listed(item: str, listed, where: str, *, source: str | None = None, why: str | None = None) -> None:
    """KeyError, before any work, unless ``item`` (the dataset a stage was asked to run on) is in ``listed``, the
    params key ``where`` (a list, or a mapping by name, shown sorted); ``source`` (the file) leads the message and
    ``why`` ends it."""
    if item not in listed:
        shown = sorted(listed) if isinstance(listed, Mapping) else listed
        raise KeyError(f"{f'{source}: ' if source else ''}{item!r} is not in {where} {shown}"
                       + (f"; {why}" if why else ""))


def dataset_entry(args, entries: Mapping[str, Any], where: str, *, source: str, why: str) -> Any:
    """The entry of the dataset a stage runs on (``--dataset``) in another section's ``entries`` (the key ``where``
    of the params file ``source``), once the stage's own section lists the dataset (``<section>.datasets``) and
    ``entries`` has it (:func:`require_listed`, ``why`` saying what is read there)."""
    require_listed(args.dataset, args.config.datasets, f"{args.stage.section}.datasets")
    require_listed(args.dataset, entries, where, source=source, why=why)
    return entries[args.dataset]


def cell_base(args, dataset_version: str, **fields: Any) -> dict[str, Any]:
    """What every cell of a stage's sweep carries besides its grid values: the dataset's version and the stage's
    code hash first (a cached cell is never reused once either changed), then ``fields``."""
    return {"dataset_version": dataset_version, "code_hash": args.stage.code_hash(), **fields}


# ---- MLflow ---------------------------------------------------------------------------------------------------
def stage_tags(**fixed: Any) -> Callable[..., dict[str, str]]:
    """``tags(seed, **extra)``: the required tags (:func:`~eegprivacy.tracking.runs.required_tags`) of one stage's
    runs, with what every run shares (study, stage, dataset, version, synthetic, dvc_stage, split...) bound once."""
    def tags(seed: int | None, **extra: Any) -> dict[str, str]:
        return required_tags(seed=seed, **fixed, **extra)

    return tags


def sweep_runner(args, name: str, folder: str | Path, *, study: str, dataset: str,
                 tags: Callable[[int | None], Mapping[str, str]], params: Mapping[str, Any]) -> SweepRunner:
    """A sweep's parent run ``name`` tagged ``tags(None)``, one child per cell tagged ``tags(cell.seed)``, its cells
    cached under ``<--cells>/<folder>``, progress shown unless ``--no-progress``."""
    return SweepRunner(name=name, study=study, dataset=dataset, out_dir=Path(args.cells) / folder,
                       parent_tags=tags(None), tags_fn=lambda cell: tags(cell.seed), params=params,
                       progress=not args.no_progress)


def log_run(study: str, tags: Mapping[str, str], run_name: str, *, params: Mapping[str, Any] | None = None,
            metrics: Mapping[str, float] | None = None, artifacts: Iterable = (), folder: str | None = None,
            extra_tags: Mapping[str, str] | None = None) -> None:
    """One MLflow run holding a stage's summary: ``metrics`` (in batches of 500, under MLflow's cap of 1000),
    ``extra_tags`` (batches of 100), and the files ``artifacts``, each a path (under ``folder``) or (path, folder)."""
    with start_run(study=study, tags=tags, run_name=run_name, params=params):
        items = list((metrics or {}).items())
        for start in range(0, len(items), 500):
            log_metrics(dict(items[start:start + 500]))
        tag_items = list((extra_tags or {}).items())
        if tag_items:
            import mlflow

            for start in range(0, len(tag_items), 100):
                mlflow.set_tags(dict(tag_items[start:start + 100]))
        for artifact in artifacts:
            path, where = artifact if isinstance(artifact, tuple) else (artifact, folder)
            log_artifact(path, where)


def log_dataset_run(study: str, stage: str, dataset: str, dataset_version: str, synthetic: bool, *,
                    run_name: str | None = None, **logged: Any) -> None:
    """:func:`log_run` for one dataset's summary of a seedless stage: the required tags with ``dvc_stage`` the
    stage, the run named ``<stage>-<dataset>`` unless ``run_name``."""
    tags = required_tags(study=study, stage=stage, dataset=dataset, dataset_version=dataset_version,
                         synthetic=synthetic, seed=None, dvc_stage=stage)
    log_run(study, tags, run_name or f"{stage}-{dataset}", **logged)


def drop_cells_without_arrays(sweeps: Iterable[tuple[SweepRunner, list]], arrays_dir: Path) -> None:
    """Delete the cached rows of every cell whose arrays (``<arrays_dir>/<cell key>.npz``) are missing, so the
    sweep computes those cells again: rows cached without their arrays (an older cache) are of no use to a stage
    that reads both."""
    for runner, cells in sweeps:
        for cell in cells:
            if runner.cell_path(cell).exists() and not (arrays_dir / f"{cell.key}.npz").exists():
                runner.cell_path(cell).unlink()


# ---- Outputs --------------------------------------------------------------------------------------------------
def output_paths(*paths: str | Path) -> list[Path]:
    """``paths`` as Paths, each one's folder made: for writers that open their file themselves (figures)."""
    out = [Path(p) for p in paths]
    for path in out:
        path.parent.mkdir(parents=True, exist_ok=True)
    return out


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """``frame`` without its index to ``path``, atomically (:func:`~eegprivacy.atomic.atomic_path`)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return Path(path)


def write_json_file(path: str | Path, payload: Any, **dumps: Any) -> Path:
    """``payload`` as indented JSON and a final newline, atomically; ``dumps`` go to :func:`json.dumps`."""
    return write_text_atomic(path, json.dumps(payload, indent=2, **dumps) + "\n")


def interval_text(entry: Mapping[str, Any] | None) -> str:
    """``value [ci_low, ci_high]`` of a summary entry as printed (None where an entry or a bound is missing)."""
    entry = entry or {}
    return f"{entry.get('value')} [{entry.get('ci_low')}, {entry.get('ci_high')}]"
