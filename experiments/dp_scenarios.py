"""Stage ``dp_scenarios`` (study A, beyond the paper): client-side, server-side (HMAC GlobalID linkage) and
decentralised (Flower FedAvg) deployment of the DP release across hospitals, LOSO utility per scenario × ε × seed
(see :mod:`eegprivacy.studies.release.scenarios`)."""

from __future__ import annotations

import os

from eegprivacy.params import ParamsError
from eegprivacy.privacy.linkage import LinkageKey
from eegprivacy.reporting.figures import save_figure
from eegprivacy.reporting.release import scenarios_figure, write_scenarios_headline
from eegprivacy.studies.release.config import DPReleaseConfig
from eegprivacy.studies.release.scenarios import scenario_sweeps, summarise, visits_of
from eegprivacy.studies.release.table import load_window_table, write_rows


def add_arguments(parser) -> None:
    parser.add_argument("--release-params", default="params/dp_release.yaml",
                        help="clip norm, δ, and the patient label and condition per dataset")
    parser.add_argument("--metrics", help="headline JSON (default metrics/dp_scenarios_<dataset>.json)")
    parser.add_argument("--figure", help="figure (default reports/figures/dp_scenarios_<dataset>.png)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes computing cells ahead (results do not depend on it)")


def run(args) -> int:
    config = args.config
    release = DPReleaseConfig.load(args.release_params, "dp_release")
    # Fail before any work: the server-side scenario has no default key and refuses to run without one.
    if "server_side" in config.scenarios:
        LinkageKey.from_env()
    if args.dataset not in release.datasets:
        raise ParamsError(f"{args.release_params}: dp_release.datasets has no entry for {args.dataset!r}; add its "
                          "patient label (and condition)")
    windows = load_window_table(args.dataset, features_dir=args.features_dir)
    frames = scenario_sweeps(windows, config, release, cells_dir=args.cells, progress=not args.no_progress,
                             n_jobs=args.jobs)
    out = args.out or f"metrics/dp_scenarios_{args.dataset}.csv"
    tidy = write_rows(frames, out, args.stage.tolerance)
    summary = summarise(tidy)
    write_scenarios_headline(summary, args.metrics or f"metrics/dp_scenarios_{args.dataset}.json")
    visits = visits_of(config, args.dataset)
    save_figure(scenarios_figure(summary, args.dataset, config.n_hospitals, windows.synthetic, visits),
                args.figure or f"reports/figures/dp_scenarios_{args.dataset}.png", dpi=120)
    print(f"{args.dataset}: {tidy['config_key'].nunique()} scenario configs x {config.noise_seeds} seeds "
          f"(visits: {visits}) -> {out}")
    return 0
