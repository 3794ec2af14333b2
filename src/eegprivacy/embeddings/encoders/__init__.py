"""Frozen EEG encoders for study C: BIOT, LaBraM and EEGPT (braindecode 1.8.1) plus a log band-power reference.

Study C audits what a provider leaks when it releases ``z = f(x)`` instead of ``x``. Every encoder here is an
sklearn-style transformer: ``fit`` does nothing (the encoder is frozen; weights come from :func:`load_checkpoint`,
from :mod:`eegprivacy.embeddings.pretrain`, or stay at a seeded random initialisation), and ``transform`` maps windows
``(n, channels, samples)`` given *at the dataset's own sampling rate and montage* to embeddings ``(n, d)``.

What ``transform`` does, and why it is explicit (protocol, "Encoders"):

1. **Channel mapping** (:class:`ChannelMapping`): the dataset's channel names are matched to the encoder's expected
   montage by name (case-insensitive, with the old/new 10-20 aliases T3/T7, T4/T8, T5/P7, T6/P8). A target
   channel the dataset lacks is never silently zero-filled: it is either dropped (LaBraM and EEGPT take any subset
   of their canonical channels, each with its own learned channel embedding) or zero-filled *with a flag*
   (BIOT's channel tokens are positional, so a channel cannot be dropped without shifting every later one), or the
   construction raises (``missing="raise"``). The mapping record (used, aliased, missing, flags) is an attribute
   and is logged.
2. **Resampling** to the encoder's expected rate (polyphase, :func:`scipy.signal.resample_poly`).
3. **Input scaling** from volts to the unit each model was pretrained on (ours, from the models' papers/code:
   BIOT per-channel 95th-percentile normalisation, LaBraM 0.1 mV, EEGPT mV).
4. The model in eval mode, without gradients, in batches; the embedding is the pooled representation before the
   classification head (BIOT: the encoder's mean over tokens; LaBraM: ``fc_norm`` of the mean patch token,
   LaBraM's fine-tuning pooling; EEGPT: the summary tokens averaged over temporal patches, concatenated over the
   ``embed_num`` summary tokens -- **ours**: EEGPT's own probe flattens over patches, which would tie ``d`` to the
   window length).

Weights: ``weights_source`` is one of ``"checkpoint"`` (a state dict of *our* module from a local path),
``"published"`` (the authors' released file in its own layout, :func:`load_published`),
``"self_pretrained"`` (:mod:`eegprivacy.embeddings.pretrain`) or ``"random_init"`` (explicit baseline); the band-power
reference has no weights (``"none"``). Nothing is ever downloaded: no hub access is possible or attempted.

Published checkpoints (the published-weights README): :func:`load_published` reads each authors' file format (BIOT: a
flat state dict; LaBraM: a training checkpoint with the weights under ``model``; EEGPT: a Lightning checkpoint),
maps its keys onto braindecode 1.8.1's classes as that README records, and loads them with the same strict key and
shape check as :func:`load_checkpoint`. The encoder must be built with :func:`published_config` (the published
architecture), whatever a profile says.

One module per job: :mod:`.base` (the channel mapping, the resampling and :class:`~.base.FrozenEncoder`, the
interface every encoder implements), one module per encoder family (:mod:`.biot`, :mod:`.labram`, :mod:`.eegpt`
and the band-power reference :mod:`.bandpower`), :mod:`.checkpoints` (our own state dicts: strict loading, saving,
the errors a weights file can raise), :mod:`.published` (the authors' released files, mapped onto our modules) and
:mod:`.registry` (an encoder by name, in the weights state a cell asks for). The package re-exports nothing, so
importing it stays cheap and a family is imported by its module
(``from eegprivacy.embeddings.encoders.registry import make_encoder``).
"""
