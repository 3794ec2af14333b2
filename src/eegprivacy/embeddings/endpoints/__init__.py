"""Study C audit endpoints on embedding matrices, each with the control that could falsify it.

Encoder-agnostic: every function takes embeddings ``Z`` (n_windows, dim) plus the per-window metadata it
needs (subject ``groups``, attribute ``A``), never the encoder. Operational choices the protocol leaves open
are marked **(ours)** and restated where they are implemented:

- attribute leakage is scored on the pooled out-of-fold predictions (all test windows of all folds), each
  fold's predictions and truths centred on that fold's test means: the mean over attribute dimensions of the
  Pearson r between predicted and true attribute (centring removes the between-fold intercept artefact that
  otherwise drives the controls far below 0);
- the subject-level bootstrap resamples subjects with replacement and recomputes the real and both control
  scores on the same resample, so L_A's interval carries the controls' uncertainty too;
- the split-local permutation control uses one seeded permutation; the permutation p-value compares the real
  score with ``n_permutations`` further split-local permutations, p = (1 + #null >= real) / (1 + n);
- every interval is over the privacy unit, the subject: membership AUC, BPID@1 and AEDS resample subjects with
  replacement (multinomial counts over subjects,
  :func:`~eegprivacy.evaluation.cluster_bootstrap.subject_counts`) exactly as L_A does, and each result says so
  in ``ci_over``. Windows of one subject are not independent (a subject random effect moves all of them),
  so a window bootstrap is far too narrow: on null data it excluded chance in most datasets.

One module per endpoint family, and the two pieces several of them share: :mod:`.decoder` (the ridge decoder the
attribute and reconstruction endpoints fit), :mod:`.resampling` (the subject bootstrap's percentile interval and the
subject columns of a joint resample), :mod:`.attribute` (attribute leakage L_A with its Gaussian and permutation
controls), :mod:`.labels` (a subject-level label such as a diagnosis, and a recording's label such as its task
state, decoded from held-out subjects against a permuted-label null), :mod:`.reconstruction` (the raw-copy check and
waveform reconstruction R^2), :mod:`.identity` (BPID@1 and R_I), :mod:`.membership` (the loss-threshold membership
AUC and R_M) and :mod:`.aeds` (AEDS = L_A - max(R_M, R_I) on one subject resample). Each is imported by its own name
(``from eegprivacy.embeddings.endpoints.attribute import attribute_leakage``): the package re-exports nothing, so a
family is read, patched and tested where it lives.
"""
