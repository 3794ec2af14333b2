"""eegprivacy: how much private information leaks from EEG data and models, and how well DP stops it."""

__version__ = "0.1.0"
