"""audit layer: Study C, the split-controlled privacy audit of frozen EEG-encoder embeddings.

Encoder-agnostic core (works on embedding matrices; see docs in each module and
shared/spec/study-c-protocol.md): ``splits`` (temporal-gap, subject-disjoint, reference-set splitters),
``attributes`` (centered PSD), ``endpoints`` (attribute leakage with negative controls, raw-copy check,
BPID@1, membership, reconstruction, AEDS) and ``defenses`` (noise, PCA bottleneck, dropout, Wiener attacker).
Submodules are imported explicitly (``from eegprivacy.audit.endpoints import attribute_leakage``) so that
importing the package stays cheap and independent of the encoders.
"""
