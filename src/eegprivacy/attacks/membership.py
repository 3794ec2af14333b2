"""Membership and client-identity inference against a federated EEG model at four levels (study B).

Everything here works on arrays the training layer hands over (probabilities, activations, update vectors);
nothing trains a neural network, reads a run store or knows an experiment.

- ``RecordLevelAttack`` (RLA): [p(class 0), p(class 1), loss] of the global model per trial.
- ``FeatureLevelAttack`` (FLA): a trial's flattened activations at an internal layer.
- ``SyntheticGradientAttack`` (GLA, the paper's): real client updates against matched Gaussian vectors. Kept to
  reproduce the paper; it does not measure membership (see its docstring).
- ``GradientLevelAttack`` (GLA, sound): updates of the same global model on member vs non-member batches.
- ``ClientLevelAttack`` (CLA): which client sent an update; PCA to at most 16 components, then the attacker.

Protocol (``evaluate_attack`` / ``MembershipAttack.evaluate``): the attack data are split into stratified,
seeded attacker-train and attacker-test halves; the attacker (``"lr"``: standardised logistic regression,
``"rf"``: random forest, ``"mlp"``: a small standardised multi-layer perceptron) and any PCA are fitted on
attacker-train only and scored on attacker-test. ``cross_fitted_scores`` scores every row instead (k-fold,
each row by an attacker that never trained on it), for low-FPR metrics that need every non-member.

Chance levels are reported beside every score because plain accuracy misleads with unequal classes: with an
80/20 train/test split per client, 80 % of the trials are members and the constant guess "member" is 80 %
accurate with no signal at all. AUROC (chance 0.5), balanced accuracy (chance 1/K) and TPR at a low FPR
(chance = that FPR) do not move with the class ratio.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.decomposition import PCA
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from eegprivacy.attacks.metrics import DEFAULT_FPRS, auroc, ovr_macro_auroc, tpr_at_fpr

__all__ = [
    "ATTACKERS",
    "CLA_MAX_COMPONENTS",
    "ClientLevelAttack",
    "FeatureLevelAttack",
    "GradientLevelAttack",
    "MembershipAttack",
    "RecordLevelAttack",
    "SyntheticGradientAttack",
    "across_rounds",
    "attack_split",
    "evaluate_attack",
    "loss_gap_regression",
    "make_attacker",
    "record_features",
    "score_attack",
]

ATTACKERS = ("lr", "rf", "mlp")
MLP_HIDDEN = (64, 32)
CLA_MAX_COMPONENTS = 16
GAUSSIAN_MATCH = ("global", "coordinate")
ROUND_METRICS = ("accuracy", "balanced_accuracy", "auroc", *(f"tpr_at_fpr_{f:g}" for f in DEFAULT_FPRS))


def make_attacker(name: str, random_state=None, n_estimators: int = 100):
    """The attack classifier by name: ``"lr"`` (scaled logistic regression), ``"rf"`` (random forest) or
    ``"mlp"`` (scaled two-layer perceptron).

    LR is scaled because loss and probabilities, or update coordinates, live on very different scales and an
    unscaled L2 penalty would silently favour the large ones. RF runs on one core (``n_jobs=1``) so that
    sweeps parallelise over cells, not trees. RF scores are vote fractions: many rows tie at 1.0, and
    ``tpr_at_fpr`` counts a tie that holds non-members against the attacker, so RF's TPR at a low FPR is a
    lower bound and can read 0 beside a high AUROC.
    """
    if name == "lr":
        return Pipeline([("scale", StandardScaler()),
                         ("clf", LogisticRegression(max_iter=2000, random_state=random_state))])
    if name == "rf":
        return RandomForestClassifier(n_estimators=n_estimators, random_state=random_state, n_jobs=1)
    if name == "mlp":
        # A non-linear attacker with smooth scores (no RF vote ties at low FPR). Early stopping on a seeded,
        # stratified 10 % of attacker-train keeps a few hundred rows from being memorised; the scaler matters
        # for the same reason as for LR (and Adam's step size assumes unit-scale inputs).
        return Pipeline([("scale", StandardScaler()),
                         ("clf", MLPClassifier(hidden_layer_sizes=MLP_HIDDEN, alpha=1e-3, max_iter=500,
                                               early_stopping=True, validation_fraction=0.1,
                                               n_iter_no_change=20, random_state=random_state))])
    raise ValueError(f"unknown attacker {name!r}; use one of {ATTACKERS}")


def attack_split(labels, test_size: float = 0.5, random_state=None, groups=None) -> tuple[np.ndarray, np.ndarray]:
    """(train_index, test_index): a stratified, seeded split of the attack data into attacker-train/-test.

    Stratified so that both halves keep the member ratio (and every client, for CLA); that needs at least two
    rows per class, otherwise an error says which class is short. With ``groups`` (e.g. the client of each
    update) whole groups go to one side (``StratifiedGroupKFold``, test share 1/round(1/test_size)), so the
    attacker is scored on groups it never trained on.
    """
    y = np.asarray(labels).ravel()
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must lie in (0, 1), got {test_size}")
    values, counts = np.unique(y, return_counts=True)
    if values.size < 2:
        raise ValueError("attack data need at least two classes (members and non-members, or two clients)")
    if counts.min() < 2:
        short = values[counts < 2].tolist()
        raise ValueError(f"classes {short} have fewer than 2 rows; a stratified attacker-train/-test split "
                         "needs at least one row of every class in each half")
    index = np.arange(y.size)
    if groups is None:
        train, test = train_test_split(index, test_size=test_size, stratify=y, random_state=random_state)
        return np.sort(train), np.sort(test)
    groups = np.asarray(groups).ravel()
    if groups.size != y.size:
        raise ValueError(f"{groups.size} groups for {y.size} rows")
    n_splits = max(2, round(1.0 / test_size))
    if np.unique(groups).size < n_splits:
        raise ValueError(f"a grouped split into {n_splits} folds needs at least {n_splits} groups")
    folds = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=random_state)
    train, test = next(folds.split(index, y, groups))
    if np.unique(y[train]).size < values.size or np.unique(y[test]).size < values.size:
        raise ValueError("the grouped split left a class out of one side; use more groups")
    return np.sort(train), np.sort(test)


def score_attack(y_true, proba, classes, fprs=DEFAULT_FPRS) -> dict[str, float]:
    """Attack scores on attacker-test rows with their chance levels.

    Binary (membership, label 1 = member): AUROC and TPR at each FPR in ``fprs`` from P(member), NaN where the
    test half holds fewer than 1/FPR non-members. Multi-class (client identity): macro one-vs-rest AUROC; TPR
    at FPR is not defined there and is NaN. ``chance_accuracy`` is what the constant majority guess scores.
    """
    y = np.asarray(y_true).ravel()
    p = np.asarray(proba, dtype=float)
    classes = np.asarray(classes).ravel()
    if p.shape != (y.size, classes.size):
        raise ValueError(f"proba must be ({y.size}, {classes.size}), got {p.shape}")
    predicted = classes[p.argmax(1)]
    _, counts = np.unique(y, return_counts=True)
    out = {
        "accuracy": float((predicted == y).mean()),
        "balanced_accuracy": float(balanced_accuracy_score(y, predicted)),
        "chance_accuracy": float(counts.max() / y.size),
        "chance_balanced_accuracy": 1.0 / classes.size,
        "chance_auroc": 0.5,
        "n_test": float(y.size),
        "n_classes": float(classes.size),
    }
    if classes.size == 2:
        positive = (y == classes[1]).astype(int)
        out["auroc"] = auroc(positive, p[:, 1])
        out["n_members"] = float(positive.sum())
        out["n_nonmembers"] = float(positive.size - positive.sum())
        for f in fprs:
            out[f"tpr_at_fpr_{f:g}"] = tpr_at_fpr(positive, p[:, 1], f)
    else:
        out["auroc"] = ovr_macro_auroc(y, p, classes)
        for f in fprs:
            out[f"tpr_at_fpr_{f:g}"] = float("nan")
    return out


def _stack(members, nonmembers) -> tuple[np.ndarray, np.ndarray]:
    """Member rows (label 1) then non-member rows (label 0), each flattened to one row per trial or update."""
    members = np.asarray(members, dtype=float)
    nonmembers = np.asarray(nonmembers, dtype=float)
    if members.ndim < 2 or nonmembers.ndim < 2:
        raise ValueError("members and non-members must be arrays with one row per trial or update")
    if members.shape[1:] != nonmembers.shape[1:]:
        raise ValueError(f"members and non-members differ in shape: {members.shape[1:]} vs "
                         f"{nonmembers.shape[1:]}")
    X = np.concatenate([members.reshape(len(members), -1), nonmembers.reshape(len(nonmembers), -1)])
    y = np.concatenate([np.ones(len(members), dtype=int), np.zeros(len(nonmembers), dtype=int)])
    return X, y


class MembershipAttack(ClassifierMixin, BaseEstimator):
    """An attack classifier on a ready attack-feature matrix; the level classes below add how to build it.

    ``fit(X, y)`` trains the optional PCA and the attacker; ``evaluate(X, y)`` runs the whole protocol (split,
    fit on attacker-train, score attacker-test) and keeps ``train_index_``/``test_index_`` for inspection.
    ``n_components`` caps the PCA (fitted inside the pipeline, hence on training rows only); ``None`` skips it.
    """

    def __init__(self, attacker: str = "lr", n_components: int | None = None, n_estimators: int = 100,
                 random_state=None):
        self.attacker = attacker
        self.n_components = n_components
        self.n_estimators = n_estimators
        self.random_state = random_state

    def fit(self, X, y):
        if self.attacker not in ATTACKERS:
            raise ValueError(f"unknown attacker {self.attacker!r}; use one of {ATTACKERS}")
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_all_finite=True, ensure_min_samples=2)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise ValueError("attack training data hold a single class; nothing to learn")
        steps = []
        self.n_components_ = None
        if self.n_components is not None:
            if int(self.n_components) < 1:
                raise ValueError(f"n_components must be >= 1 or None, got {self.n_components}")
            self.n_components_ = min(int(self.n_components), X.shape[0], X.shape[1])
            steps.append(("pca", PCA(n_components=self.n_components_, random_state=self.random_state)))
        steps.append(("attacker", make_attacker(self.attacker, self.random_state, self.n_estimators)))
        self.pipeline_ = Pipeline(steps).fit(X, y)
        return self

    def predict_proba(self, X) -> np.ndarray:
        check_is_fitted(self, "pipeline_")
        X = validate_data(self, X, dtype=np.float64, ensure_all_finite=True, reset=False)
        return self.pipeline_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(1)]

    def decision_function(self, X) -> np.ndarray:
        """P(member) for a membership attack (higher = member); the class probabilities for CLA."""
        proba = self.predict_proba(X)
        return proba[:, 1] if self.classes_.size == 2 else proba

    def evaluate(self, X, y, test_size: float = 0.5, fprs=DEFAULT_FPRS, groups=None) -> dict[str, float]:
        """Split with ``random_state`` (by ``groups`` if given), fit on attacker-train, score attacker-test."""
        X = np.asarray(X, dtype=float)
        y = np.asarray(y).ravel()
        if X.ndim != 2 or X.shape[0] != y.size:
            raise ValueError(f"features must be (n_rows, n_features) with one label per row; got {X.shape} "
                             f"and {y.size} labels")
        train, test = attack_split(y, test_size, self.random_state, groups)
        self.fit(X[train], y[train])
        self.train_index_, self.test_index_ = train, test
        out = score_attack(y[test], self.predict_proba(X[test]), self.classes_, fprs)
        out["n_train"] = float(train.size)
        return out


    def cross_fitted_scores(self, X, y, n_splits: int = 2) -> np.ndarray:
        """P(member) for every row from an attacker fitted on the other folds (stratified, seeded k-fold).

        The one-split protocol scores half the rows, and with an 80/20 split that leaves too few non-members to
        resolve a TPR at 1 % FPR; here every row is scored once, never by an attacker that saw its label. The
        k fits differ, so pooled scores are comparable only as far as each fit is calibrated.
        """
        X = np.asarray(X, dtype=float)
        y = np.asarray(y).ravel()
        if X.ndim != 2 or X.shape[0] != y.size:
            raise ValueError(f"features must be (n_rows, n_features) with one label per row; got {X.shape} "
                             f"and {y.size} labels")
        if int(n_splits) < 2:
            raise ValueError(f"n_splits must be >= 2, got {n_splits}")
        _, counts = np.unique(y, return_counts=True)
        if counts.size != 2 or counts.min() < int(n_splits):
            raise ValueError(f"cross-fitting needs members and non-members, at least {n_splits} of each")
        scores = np.full(y.size, np.nan)
        folds = StratifiedKFold(n_splits=int(n_splits), shuffle=True,
                                random_state=check_random_state(self.random_state).randint(2**31 - 1))
        for train, test in folds.split(X, y):
            scores[test] = self.fit(X[train], y[train]).decision_function(X[test])
        return scores


class RecordLevelAttack(MembershipAttack):
    """RLA: was this trial in training? Black-box access to the global model's probabilities and loss."""

    def attack_data(self, member_proba, member_targets, nonmember_proba, nonmember_targets,
                    member_loss=None, nonmember_loss=None) -> tuple[np.ndarray, np.ndarray]:
        return _stack(record_features(member_proba, member_targets, member_loss),
                      record_features(nonmember_proba, nonmember_targets, nonmember_loss))


def record_features(proba, targets, loss=None) -> np.ndarray:
    """[p(class 0), …, p(class C−1), loss] per trial; the loss is cross-entropy of the true class if not given.

    Rows must be probabilities (softmax outputs): logits passed by mistake would still train an attacker, on
    the wrong signal, so they are refused.
    """
    p = np.asarray(proba, dtype=float)
    t = np.asarray(targets).ravel().astype(int)
    if p.ndim != 2 or p.shape[0] != t.size:
        raise ValueError(f"proba must be (n_trials, n_classes) with one target per trial; got {p.shape}, {t.size}")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any() or not np.allclose(p.sum(1), 1.0, atol=1e-3):
        raise ValueError("proba rows must be probabilities summing to 1 (softmax outputs, not logits)")
    if ((t < 0) | (t >= p.shape[1])).any():
        raise ValueError(f"targets must lie in 0..{p.shape[1] - 1}")
    if loss is None:
        loss = -np.log(np.clip(p[np.arange(t.size), t], 1e-12, None))
    loss = np.asarray(loss, dtype=float).ravel()
    if loss.size != t.size:
        raise ValueError(f"loss has {loss.size} values for {t.size} trials")
    return np.column_stack([p, loss])


class FeatureLevelAttack(MembershipAttack):
    """FLA: was this trial in training? White-box access to activations at one internal layer."""

    def attack_data(self, member_activations, nonmember_activations) -> tuple[np.ndarray, np.ndarray]:
        """Activations of any shape per trial, (n_trials, …), flattened to one row per trial."""
        return _stack(member_activations, nonmember_activations)


class SyntheticGradientAttack(MembershipAttack):
    """GLA as the paper ran it: real client updates (label 1) vs Gaussian vectors matched to them (label 0).

    Why this is not a membership test. Every positive is a real update and every negative is synthetic noise,
    so the classifier learns "real update or matched Gaussian?": a goodness-of-fit test of the update
    distribution. It separates them whenever real updates differ from the matched Gaussian in anything the
    matching left out — coordinate-specific means and scales (``match="global"``, one mean and variance for all
    coordinates), correlations between coordinates, heavy tails, exact zeros of dead units — none of which
    depends on whose data produced the update. Updates computed on data the model never saw score just as
    high, so a near-perfect score says nothing about membership. Its fall under DP has the same cause: clipped,
    Laplace-noised updates are closer to noise and so harder to tell from noise, whatever they reveal about
    members. ``GradientLevelAttack`` is the sound version; ``tests/test_attacks_membership.py``
    shows this one near 1 and that one at chance on updates that carry no membership signal.

    ``match``: ``"global"`` (one mean and variance over all coordinates; the literal reading of the paper) or
    ``"coordinate"`` (per-coordinate mean and variance over the updates). ``negatives_per_update`` synthetic
    rows are drawn per real update, from ``random_state``.
    """

    def __init__(self, attacker: str = "lr", match: str = "global", negatives_per_update: int = 1,
                 n_components: int | None = None, n_estimators: int = 100, random_state=None):
        super().__init__(attacker=attacker, n_components=n_components, n_estimators=n_estimators,
                         random_state=random_state)
        self.match = match
        self.negatives_per_update = negatives_per_update

    def attack_data(self, updates) -> tuple[np.ndarray, np.ndarray]:
        real = np.asarray(updates, dtype=float)
        real = real.reshape(len(real), -1)
        if self.match not in GAUSSIAN_MATCH:
            raise ValueError(f"unknown match {self.match!r}; use one of {GAUSSIAN_MATCH}")
        if len(real) < 2 or not np.isfinite(real).all():
            raise ValueError("need at least two finite update vectors")
        if int(self.negatives_per_update) < 1:
            raise ValueError(f"negatives_per_update must be >= 1, got {self.negatives_per_update}")
        rng = np.random.default_rng(check_random_state(self.random_state).randint(2**31 - 1))
        shape = (len(real) * int(self.negatives_per_update), real.shape[1])
        if self.match == "global":
            synthetic = rng.normal(real.mean(), real.std(), size=shape)
        else:
            synthetic = rng.normal(real.mean(0), real.std(0), size=shape)
        return _stack(real, synthetic)


class GradientLevelAttack(MembershipAttack):
    """GLA, sound version: did this update come from member data or from non-member data?

    Each update must come from the same global model and the same local procedure (steps, learning rate, DP
    mod), once on a batch of member trials and once on an equally large batch of non-member trials, so that
    membership is the only difference between the classes; a different batch size or step count would be
    detected instead. The training layer computes the updates; this class only sees the vectors.

    Split by client (``evaluate(..., groups=client_of_each_update)``) or compute every update on trials no other
    update uses. Updates drawn from one client's fixed member and non-member pools share each pool's
    fingerprint (its particular mean gradient), so an attacker scored on the same pools learns which pool an
    update came from — above chance even for a model that never trained on either.
    """

    def attack_data(self, member_updates, nonmember_updates) -> tuple[np.ndarray, np.ndarray]:
        return _stack(member_updates, nonmember_updates)


class ClientLevelAttack(MembershipAttack):
    """CLA: which client sent this update? Updates from all rounds, labelled by client; chance is 1/K.

    PCA to at most ``n_components`` (16) is part of the fitted pipeline, so it sees attacker-train rows only;
    an update in attacker-test never shapes the components it is projected on.
    """

    def __init__(self, attacker: str = "lr", n_components: int | None = CLA_MAX_COMPONENTS,
                 n_estimators: int = 100, random_state=None):
        super().__init__(attacker=attacker, n_components=n_components, n_estimators=n_estimators,
                         random_state=random_state)

    def attack_data(self, updates, client_ids) -> tuple[np.ndarray, np.ndarray]:
        """``updates``: (n, …) or a list of per-round (n_r, …) arrays; ``client_ids`` aligned with the rows."""
        if isinstance(updates, (list, tuple)):
            updates = np.concatenate([np.asarray(u, dtype=float).reshape(len(u), -1) for u in updates])
            client_ids = np.concatenate([np.asarray(c).ravel() for c in client_ids])
        X = np.asarray(updates, dtype=float)
        X = X.reshape(len(X), -1)
        y = np.asarray(client_ids).ravel()
        if y.size != len(X):
            raise ValueError(f"{len(X)} updates but {y.size} client ids")
        return X, y


def evaluate_attack(features, labels, attacker: str = "lr", random_state=None, *, n_components=None,
                    test_size: float = 0.5, fprs=DEFAULT_FPRS, n_estimators: int = 100,
                    groups=None) -> dict[str, float]:
    """The common protocol on ready attack data: stratified seeded halves, fit on one, score the other.

    Returns ``score_attack``'s dict (accuracy, balanced accuracy, AUROC, TPR at each FPR, chance levels,
    counts) plus ``n_train``. For CLA pass ``n_components=CLA_MAX_COMPONENTS`` or use ``ClientLevelAttack``.
    """
    attack = MembershipAttack(attacker=attacker, n_components=n_components, n_estimators=n_estimators,
                              random_state=random_state)
    return attack.evaluate(features, labels, test_size=test_size, fprs=fprs, groups=groups)


def _chance_for(metric: str, frame: pd.DataFrame) -> float:
    column = f"chance_{metric}"
    if column in frame:
        return float(frame[column].mean())
    if metric.startswith("tpr_at_fpr_"):
        return float(metric.removeprefix("tpr_at_fpr_"))  # a random guess has TPR = FPR
    return float("nan")


def across_rounds(per_round, metrics=ROUND_METRICS, by=()) -> pd.DataFrame:
    """Mean ± std of each metric across federated rounds (the paper's ±), one tidy row per (group, metric).

    ``per_round``: one row per round (a DataFrame or a list of ``evaluate_attack`` dicts, with any grouping
    columns such as ``seed``, ``epsilon``, ``attack``, ``attacker``). The std is the sample std (ddof = 1) and
    describes how the attack varies over training, not uncertainty of the mean: rounds of one run are not
    independent draws. Across-seed confidence intervals belong one level up — group these rows by everything
    but ``seed`` and take the interval of ``across_rounds_mean`` over seeds. Rounds where a metric is NaN
    (e.g. too few non-members for a TPR) are left out; ``n_rounds`` counts the rounds used.
    """
    frame = pd.DataFrame(per_round)
    by = list(by)
    missing = [c for c in (*by, *metrics) if c not in frame]
    if missing:
        raise ValueError(f"per-round results lack columns {missing}")
    groups = frame.groupby(by, sort=True, dropna=False) if by else [((), frame)]
    rows = []
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        for metric in metrics:
            values = part[metric].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            rows.append({**dict(zip(by, key)), "metric": metric,
                         "across_rounds_mean": float(values.mean()) if values.size else float("nan"),
                         "across_rounds_std": float(values.std(ddof=1)) if values.size > 1 else float("nan"),
                         "n_rounds": int(values.size),
                         "chance": _chance_for(metric, part)})
    return pd.DataFrame(rows)


def loss_gap_regression(loss_gap, attack_accuracy, method: str = "auto") -> dict[str, float | str]:
    """OLS of RLA accuracy on the loss gap (test − train loss): slope, intercept, R², p of the slope, n.

    ``method``: ``"statsmodels"`` (OLS with a constant), ``"scipy"`` (``scipy.stats.linregress``, the same
    fit and two-sided t-test for one predictor) or ``"auto"`` (statsmodels when importable, else scipy); the
    result names the one used. Points from successive rounds of one run are autocorrelated, so the p-value
    treats them as more independent than they are and should be read as optimistic. Non-finite pairs are
    dropped and counted in ``n_dropped``.
    """
    x = np.asarray(loss_gap, dtype=float).ravel()
    y = np.asarray(attack_accuracy, dtype=float).ravel()
    if x.size != y.size:
        raise ValueError(f"loss_gap and attack_accuracy differ in length: {x.size} vs {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 3 or np.ptp(x) == 0:
        raise ValueError("need at least 3 finite points with varying loss gap for a regression")
    if method == "auto":
        method = "statsmodels" if importlib.util.find_spec("statsmodels") is not None else "scipy"
    if method == "statsmodels":
        import statsmodels.api as sm

        fit = sm.OLS(y, sm.add_constant(x)).fit()
        slope, intercept = float(fit.params[1]), float(fit.params[0])
        r2, p, stderr = float(fit.rsquared), float(fit.pvalues[1]), float(fit.bse[1])
    elif method == "scipy":
        from scipy import stats

        fit = stats.linregress(x, y)
        slope, intercept = float(fit.slope), float(fit.intercept)
        r2, p, stderr = float(fit.rvalue**2), float(fit.pvalue), float(fit.stderr)
    else:
        raise ValueError(f"unknown method {method!r}; use 'auto', 'statsmodels' or 'scipy'")
    return {"slope": slope, "slope_stderr": stderr, "intercept": intercept, "r2": r2, "p_value": p,
            "n": int(x.size), "n_dropped": int((~keep).sum()), "method": method}
