"""embeddings layer: Study C, the split-controlled privacy audit of frozen EEG-encoder embeddings.

Encoder-agnostic core (works on embedding matrices; see docs in each module and
shared/spec/study-c-protocol.md): ``splits`` (temporal-gap, subject-disjoint, reference-set splitters),
``attributes`` (centered PSD), ``endpoints`` (a package, one module per endpoint family: attribute leakage with
negative controls, subject- and window-label leakage, raw-copy check and reconstruction, BPID@1, membership, AEDS),
``bridge`` (cross-encoder bridge D_s(B(z_t)) with its lower bound),
``defenses`` (noise, PCA bottleneck, dropout, Wiener attacker), ``heads`` (the downstream head both endpoints and
defenses fit, and its weighted balanced accuracy) and ``dp_head`` (DP-SGD-trained downstream head,
Opacus; its hidden layer is the released representation). Study C composes them on real data in
:mod:`eegprivacy.studies.embedding_audit` (stage ``embedding_audit``); the encoders and their pretraining are in
``encoders`` (a package: the shared interface, one module per encoder family, checkpoints) and ``pretrain``.
Submodules are imported explicitly (``from eegprivacy.embeddings.endpoints.attribute import attribute_leakage``)
so that importing the package stays cheap and independent of the encoders.
"""
