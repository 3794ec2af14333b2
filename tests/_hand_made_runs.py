"""Hand-made study B and C sweeps (a parent with aggregates and one child, required tags) in the current MLflow
store: enough for the report and the notebooks to draw their B and C tables and figures in tests."""

from __future__ import annotations

from eegprivacy.tracking import log_metrics, required_tags, start_run


def _parent_with_child(study: str, name: str, dataset: str, synthetic: bool, metrics: dict, cell_tags=None,
                       **tags) -> str:
    """A hand-made sweep: one parent (aggregates) and one child (per-seed value), with the required tags."""
    import mlflow

    common = dict(study=study, stage={"b": "federated_mia_report", "c": "embedding_audit"}[study], dataset=dataset,
                  dataset_version=("synthetic-" if synthetic else "") + "ab" * 32, synthetic=synthetic)
    with start_run(study=study, tags=required_tags(seed=None, **common, **tags), run_name=name) as parent:
        log_metrics(metrics)
        if cell_tags:
            mlflow.set_tags(cell_tags)
        with start_run(study=study, tags=required_tags(seed=0, **common, **tags), run_name=f"{name}/0",
                       parent_run_id=parent.info.run_id):
            log_metrics({k.removesuffix("_mean"): v for k, v in metrics.items() if k.endswith("_mean")})
    return parent.info.run_id


def hand_made_b_and_c() -> None:
    """A tiny study B (one report run of a dataset, two ε) and study C (a real-data-tagged and a synthetic encoder
    run) in the current store. Study B's run is ``federated_mia_report``'s: the summary cells with their logged
    p-values (:func:`eegprivacy.studies.federated.report.run_metrics`)."""
    metrics, cell_tags = {}, {}
    for eps, auc in (("inf", 0.91), ("1", 0.55)):
        cell = f"summary/simplenet/eps_{eps}"
        metrics.update({
            f"{cell}/utility/none/utility_accuracy_mean": 0.7,
            f"{cell}/utility/none/utility_accuracy_ci_low": 0.65,
            f"{cell}/utility/none/utility_accuracy_ci_high": 0.75,
            f"{cell}/cla/lr/auroc_mean": auc,
            f"{cell}/cla/lr/auroc_ci_low": auc - 0.04,
            f"{cell}/cla/lr/auroc_ci_high": auc + 0.04,
            f"{cell}/cla/rf/auroc_mean": auc - 0.1,
            f"{cell}/rla_untrained_control/lr/auroc_mean": 0.503,
        })
        cell_tags[f"{cell}/cla/lr/auroc_ci_over"] = "seeds"
    _parent_with_child("b", "federated_mia_report-synthetic_mi", "synthetic_mi", True, metrics, cell_tags)
    for dataset, synthetic, l_a in (("eegmat", False, 0.42), ("synthetic_rest_task", True, 0.77)):
        base = "endpoint_aeds/split_subject_disjoint_reference_set/defense_none/attacker_none"
        _parent_with_child("c", f"embedding_audit-{dataset}-biot-self_pretrained", dataset, synthetic, {
            f"unit_aeds/{base}/l_a_mean": l_a, f"unit_aeds/{base}/aeds_mean": l_a - 0.3,
            "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1_mean": 0.163,
            "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1_ci_low": 0.1,
            "unit_identity/endpoint_identity/split_x/defense_none/attacker_centroid_cosine/bpid_at_1_ci_high": 0.2,
            "unit_membership/endpoint_membership_head/split_h/defense_none/attacker_lira_online/auc_mean": 0.766,
        }, encoder="biot", model="biot")
