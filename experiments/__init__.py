"""Thin DVC stage entry points, one module per stage, mounted as ``eegprivacy <stage>`` subcommands.

Each module defines NAME, HELP, ``add_arguments(parser)`` and ``run(args) -> int``.
"""
