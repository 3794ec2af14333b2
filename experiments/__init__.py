"""Thin DVC stage entry points, one module per stage, mounted as ``eegprivacy <stage>`` subcommands.

Each module defines ``add_arguments(parser)`` (optional) and ``run(args) -> int``; the registry
(:mod:`eegprivacy.pipeline.stages`) adds the shared flags, and the glue every script would repeat (other stages'
params, the MLflow tags and sweep runners, the output files) is :mod:`eegprivacy.pipeline.stage_script`.
"""
