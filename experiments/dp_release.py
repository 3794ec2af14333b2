"""Stage ``dp_release`` (study A): DP releases of the patient feature table over ε × mechanism × noise seeds,
scored by intrinsic utility (RMSE, MAE, correlation, SNR) against the mechanism's input."""

from __future__ import annotations

from eegprivacy.evaluation.utility import clipping_distortion, intrinsic_utility
from eegprivacy.params import load_params
from eegprivacy.tracking.sweep import expand_grid

from experiments._study_a import calibration, code_hash, load_patient_table, release, run_sweep, write_rows

NAME = "dp-release"
HELP = ("Study A: release the patient-level feature table with each DP mechanism at each ε over many noise "
        "seeds; write per-seed intrinsic utility (tidy CSV) and log one MLflow parent run per mechanism.")


def add_arguments(parser) -> None:
    parser.add_argument("--dataset", required=True, help="dataset with a features table, e.g. eegmat")
    parser.add_argument("--params", default="params/dp_release.yaml", help="study A params file")
    parser.add_argument("--out", help="tidy per-seed rows (default metrics/dp_release_<dataset>.csv)")
    parser.add_argument("--cells", default="data/sweeps", help="resumable per-cell cache folder")
    parser.add_argument("--features-dir", default="data/features", help="where the features stage wrote tables")
    parser.add_argument("--no-progress", action="store_true")


def cells_for(table, params: dict, mechanism: str, extra: dict | None = None):
    """ε × noise-seed cells of one mechanism; each cell's config carries its calibrated noise scale."""
    cells = []
    for epsilon in params["epsilons"]:
        base = {**table.base_config, **(extra or {}), "clip_norm": params["clip_norm"], "delta": params["delta"],
                **calibration(table, mechanism, epsilon, params["delta"], params["clip_norm"])}
        cells += expand_grid({"mechanism": [mechanism], "epsilon": [float(epsilon)]},
                             seeds=range(params["noise_seeds"]), base=base)
    return cells


def run(args) -> int:
    params = load_params(args.params, "dp_release")
    label = params["datasets"][args.dataset]["label"]
    table = load_patient_table(args.dataset, label, features_dir=args.features_dir)
    frames = []
    for mechanism in params["mechanisms"]:
        def cell_fn(config, seed, mechanism=mechanism):
            releaser, released = release(table, mechanism, config["epsilon"], config["delta"], config["clip_norm"],
                                         seed)
            rows = [{"protocol": "intrinsic", "metric": k, "value": v}
                    for k, v in intrinsic_utility(releaser.clipped_, released).items()]
            rows += [{"protocol": "clipping", "metric": k, "value": v}
                     for k, v in clipping_distortion(releaser.scaled_, releaser.clipped_).items()]
            rows.append({"protocol": "intrinsic", "metric": "noise_scale", "value": config["noise_scale"]})
            return rows

        cells = cells_for(table, params, mechanism, extra={"code_hash": code_hash("dp_release.py")})
        frames.append(run_sweep(table, "dp_release", mechanism, cells, cell_fn, cells_dir=args.cells,
                                params={"dp_release": params, "label": label, **table.base_config},
                                progress=not args.no_progress, mechanism=mechanism, delta=params["delta"]))

    out = args.out or f"metrics/dp_release_{args.dataset}.csv"
    tidy = write_rows(frames, out)
    print(f"{args.dataset}: {tidy['config_key'].nunique()} configs x {params['noise_seeds']} seeds -> {out}")
    return 0
