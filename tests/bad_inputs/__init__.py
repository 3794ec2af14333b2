"""The bad-input corpus: builders that write each kind of broken input from real files of the local mirror.

Nothing is stored here; ``tests/test_bad_inputs.py`` builds every input in a temporary folder, so the corpus
cannot drift from the real files it is made of.
"""
