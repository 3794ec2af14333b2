"""Stage ``dp_scenarios`` (study A, beyond the paper): client-side, server-side (HMAC GlobalID linkage) and
decentralised (Flower FedAvg) deployment of the DP release across hospitals, LOSO utility per scenario × ε × seed
(see :mod:`eegprivacy.studies.release.scenarios`)."""

from __future__ import annotations

from eegprivacy.params import ParamsError
from eegprivacy.pipeline.stage_script import add_headline_flags, add_params_flags, headline_paths, read_section
from eegprivacy.privacy.linkage import LinkageKey
from eegprivacy.reporting.figures import save_figure
from eegprivacy.reporting.release import scenarios_figure, write_scenarios_headline
from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.scenarios import scenario_sweeps, summarise, visits_of
from eegprivacy.studies.release.table import load_window_table, write_rows


def add_arguments(parser) -> None:
    add_params_flags(parser, release="clip norm, δ, and the patient label and condition per dataset")
    add_headline_flags(parser, "dp_scenarios")


def run(args) -> int:
    config, release = args.config, read_section(args.release_params, DPReleaseConfig)
    # Fail before any work: the server-side scenario has no default key and refuses to run without one.
    if "server_side" in config.scenarios:
        LinkageKey.from_env()
    if args.dataset not in release.datasets:
        raise ParamsError(f"{args.release_params}: dp_release.datasets has no entry for {args.dataset!r}; add its "
                          "patient label (and condition)")
    windows = load_window_table(args.dataset, features_dir=args.features_dir)
    frames = scenario_sweeps(windows, config, release, cells_dir=args.cells, progress=not args.no_progress,
                             n_jobs=args.jobs)
    out, metrics, figure = headline_paths(args, "dp_scenarios")
    tidy = write_rows(frames, out, args.stage.tolerance)
    summary = summarise(tidy)
    write_scenarios_headline(summary, metrics)
    visits = visits_of(config, args.dataset)
    save_figure(scenarios_figure(summary, args.dataset, config.n_hospitals, windows.synthetic, visits), figure,
                dpi=120)
    print(f"{args.dataset}: {tidy['config_key'].nunique()} scenario configs x {config.noise_seeds} seeds "
          f"(visits: {visits}) -> {out}")
    return 0
