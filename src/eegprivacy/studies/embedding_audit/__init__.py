"""Study C, the split-controlled audit of frozen EEG-encoder embeddings, as library code a notebook can import
(the protocol: ``shared/spec/study-c-protocol.md``; the encoder-agnostic layer it composes: ``eegprivacy.embeddings``).

Every endpoint runs under the split that can falsify it:

- subjects: ``pretrain_subjects`` of the dataset never enter an audit split; the first half of each of their
  recordings pretrains each neural encoder (masked-patch reconstruction, :mod:`eegprivacy.embeddings.pretrain`),
  the end of it is the non-members of the encoder-membership attack (:mod:`.data`). The remaining subjects are
  audited; a seeded half of them (``head`` subjects) trains the downstream rest-vs-arithmetic head whose
  membership is attacked, the other half (``release``) is what the DP-SGD head releases (:mod:`.context`).
- per (encoder, weights) cell (:mod:`.units`, :mod:`.cells`): raw-copy check, centered-PSD attribute leakage L_A
  under the temporal-gap and the subject-disjoint split (Gaussian and split-local permutation controls, subject
  bootstrap CI, permutation p), BPID@1 with rest windows as enrollment and arithmetic windows as queries,
  loss-threshold and LiRA membership against the head and loss-threshold membership against the pretrained
  encoder, held-out-subject reconstruction R², AEDS, the deployment check (rest vs arithmetic of held-out
  subjects, clean and noised) and the defenses (noise with a naive and a Wiener attacker, PCA bottleneck,
  coordinate dropout, DP-SGD head), each with the head's balanced accuracy.
- the cross-encoder bridge for every ordered pair of the audited encoders (their primary weights).

Modules: :mod:`.config` (typed params), :mod:`.data` (windows and roles), :mod:`.embed` (cached embeddings),
:mod:`.context` (what a cell needs, memoised across worker processes), :mod:`.cells` (the rows of one unit),
:mod:`.workers` (one thread per cell, contexts shipped once), :mod:`.summaries` (tidy table, mean over seeds),
:mod:`.study` (the runners, end to end). Figures, report and headline: :mod:`eegprivacy.reporting.embedding_audit`.
"""
