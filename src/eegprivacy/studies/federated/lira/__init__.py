"""Study B, strongest attack: LiRA with shadow federations, to ask whether per-step DP still looks protective
against the strongest membership attack we can mount on the federated model.

Shadow federations go through exactly the target's pipeline (:class:`~eegprivacy.studies.federated.mia.Federation`
and :func:`~eegprivacy.studies.federated.mia.federate`, training knobs read from ``params/federated_mia.yaml``):
one client per subject, each client's CSP fitted on its own training trials, FedAvg with the same rounds, epochs,
sampling, learning rate and DP. Shadows train on ``shadow_in_fraction`` of every (subject, label) group of trials
(0.8 in the params, the target's member share: at 0.5, Carlini et al.'s complementary halves, each client's
member-fitted CSP differs between shadows and target and the untrained control fell below chance, AUROC 46 %; at
0.8 it sits at 50 %); CSP, like the model, sees only the IN trials. One set of shadows per ε serves every target
seed.

The shadow masks are balanced (:func:`shadow_membership`): every trial is IN in exactly k = round(n_shadows ·
shadow_in_fraction) shadows and OUT in the other n_shadows − k, and every shadow holds k/n_shadows of each
(subject, label) group to within one trial. The per-trial IN/OUT counts are therefore constant and carry no
information about any membership. That was not so before: the earlier block design at 0.8 gave trials 12 or 13
OUT shadows of 64, and a trial's OUT count alone predicted a held-out shadow's membership with AUROC ≈ 0.83,
an answer leaked into the shadow-as-target check. What LiRA reads, and what it does not: its IN/OUT fits come
from the shadows' φ and masks alone, the same for every target; it never reads a target's split, and the masks
are drawn independently of every target's split (from ``shadow_seed``), so they say nothing about a target's
members either.

Targets are federations built exactly as ``federated_mia``'s, one per target seed 0..S-1, and each draws its
own per-subject 80/20 member split of every client's trials, seeded by the target index exactly as
``federated_mia``'s seed is (:func:`target_member`): a pooled score is then about many splits, not one, and the
non-members of the S targets together cover most trials. Every trial is scored through its client's CSP, fitted
on that target's members, then the global model. Attacks on each target:

- ``lira_online`` / ``lira_offline``: :class:`~eegprivacy.attacks.lira.LiRA` on φ = logit confidence of the
  true label under the final global model, against the shadows' φ of the same trial.
- ``rla`` with ``lr``/``rf``/``mlp`` attackers: [p0, p1, loss] trained on the target's own member labels,
  cross-fitted (k folds) so that every trial is scored by an attacker that never saw its label.
- ``lira_online_control`` / ``lira_offline_control``, the preprocessing-only control (``federated_control``'s
  control applied to LiRA): each client's CSP and scaling are fitted on its members, so members sit further from
  the decision boundary in CSP space *whatever model is applied afterwards*, and an attack on the trained model
  detects that as well as training. Per target, ``control_folds`` fold federations are trained exactly like the
  target (same :func:`~eegprivacy.studies.federated.mia.federate`, seed, ε and member split), each without one
  client fold (:func:`~eegprivacy.studies.federated.control.client_folds`; the other clients keep their own
  member-fitted CSP, which does not depend on the other clients). Client k's control φ is the logit confidence
  of the fold model that never saw k, on k's trials through *the target's* preprocessing of k (EEGNet, FedBN:
  BatchNorm statistics calibrated on k's members, as the trained model's come from them); LiRA scores it against
  the same shadows exactly as it scores the target (:func:`control_phi`). What the control detects comes from
  preprocessing and from what all subjects share, not from training on the client.
- ``lira_online_untrained_control``: LiRA on the untrained initial models (target and shadows alike). Shown, never
  tested, and not the control: an untrained network's outputs are nearly constant, so it cannot show a
  preprocessing leak.

Which TPRs are reported (:data:`MIN_BEYOND`): a TPR at FPR f is a number only where at least 10 *independent*
non-members lie beyond its threshold, f · n_independent ≥ 10 (:func:`resolvable`), independent non-members being
distinct trials that were a non-member of at least one model, each counted once however many models held it out
(:func:`independent_nonmembers`): pooling S models over the same trial does not multiply what a false-positive
rate can rest on. Below that the TPR is NaN in the rows, ``resolvable`` False, and its ``note`` reads "not
resolvable: needs ≥ N independent non-members, has M; supports F % FPR", F the lowest FPR on the 1-2-5 grid the
pool resolves (:func:`resolvable_fpr`). The TPR at zero false positives is never resolvable: a threshold above
every non-member has, by construction, no non-member beyond it (:data:`ZERO_FPR_NOTE`).

Scores: per target seed AUROC and the TPR at 1 % and 0.1 % FPR where one target's non-members resolve them
(144 do not: NaN), mean and t-interval over target seeds (``ci_over = seeds``, ``ci_method = t_interval``). Pooled
over the S target models (:func:`pooled_rows`): the AUROC with a two-way percentile bootstrap that resamples
target models and clusters of trials (``ci_method = two_way_bootstrap``; ``bootstrap_unit``: subjects = clients,
the default, or single trials; ``ci_over`` says which); the TPR at 0.1 % FPR and at the lowest resolvable FPR
(``tpr_at_resolvable_fpr``, its FPR in ``fpr``), where resolvable, with the blocked threshold bootstrap
(``ci_method = blocked_threshold_bootstrap``, :func:`cluster_bootstrap`): the same resamples, the threshold
re-estimated at that FPR on each resample's non-members and the TPR read off its members, so the interval carries
the threshold's sampling error and the clustering of trials within subjects. Every pooled row states the subject
clusters of the pool (``n_clusters``).

LiRA − control (:func:`control_difference_rows`, metric :data:`DIFF_METRIC`, ``scope = target_pooled``): the
pooled AUROC of ``lira_online`` (``lira_offline``) minus that of its control, paired, with a percentile interval
from the same two-way bootstrap (the same resamples of target models and subjects for attack and control,
``ci_method = paired_two_way_bootstrap``), its two-sided bootstrap p-value of "difference = 0" and Holm over the
table's attack − control cells (every ε and both modes; :func:`holm_control_cells`). Controls are not hypotheses
of the family: their rows carry no p-value. ``control_share`` = (control − 0.5) / (attack − 0.5), how much of the
attack's AUROC excess over chance the control reaches.
Shadow-as-target (``scope = shadow_loo``, :func:`shadow_loo`): each shadow in turn is the target of LiRA fitted on
the shadows outside its balanced leave-out group (:func:`loo_group_size`: pairs at 0.5, groups of 5 at 0.8 with 60
shadows), so every trial keeps the same number of IN and OUT fitting shadows; the shadows' own membership game
(IN share k/n_shadows), pooled under the same rule.

The stage in modules, each one job: :mod:`.config` (the stage's typed params and the names its rows use),
:mod:`.design` (the balanced shadow masks and the leave-out groups of shadow-as-target), :mod:`.federations` (the
shadow and control federations, trained through :func:`~eegprivacy.studies.federated.mia.federate`, and every
trial's logits through its own client), :mod:`.scoring` (the resolvability rule and one model's rows),
:mod:`.targets` (one target cell, and each shadow as a target), :mod:`.pooled` (pooled over models: the two-way
bootstrap, LiRA − control with Holm, the summary table) and :mod:`.study` (:class:`~.study.LiRAStudy`, the
order the stage runs them in). The package re-exports nothing: import from the module that holds the name.
"""
