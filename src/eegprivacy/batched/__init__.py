"""Many small models trained as one tensor program (issue 22).

The studies train thousands of tiny models one at a time: study A's leave-one-subject-out MLP fits (3,570 per
cell on MSU with the inner LOSO), study B's clients within a round, LiRA's shadow federations. Each fit is a
few hundred small matrix products plus Python overhead. Here the fits of one evaluation share one program:
their weights are stacked along a leading *task* axis and every epoch is one batched product per layer, with
each task's training rows selected by a 0/1 weight.

The maths is the one-model path's, step for step (same initial weights from the same seed, same loss,
gradients, optimizer and stopping rule), so a batched result equals the one-at-a-time result up to floating
point order, and ``tests/test_batched_mlp.py`` holds it to that.

- :mod:`eegprivacy.batched.mlp` — scikit-learn's ``StandardScaler + MLPClassifier`` (Adam, full batch), the
  paper's patient-level classifier, for many (training rows, test rows) tasks at once.
- :mod:`eegprivacy.batched.logistic` — ``StandardScaler + LogisticRegression`` (L2) fitted to its exact optimum
  for many label vectors on one training matrix (truncated Newton): study C's subject-label permutation null
  (1,000 refits per fold) in seconds instead of tens of minutes.

This package sits beside ``models``: it imports no study and no tracking. ``embedding_audit`` lists it in its code
(``pipeline/stages.py``) and ``dvc.yaml`` deps, so its cached cells are invalidated when this code changes; a
stage that starts calling the MLP must do the same.
"""

from eegprivacy.batched.mlp import MAX_FULL_BATCH_ROWS, AdamMLP

__all__ = ["AdamMLP", "MAX_FULL_BATCH_ROWS"]
