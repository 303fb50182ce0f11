"""Subcommands of ``dppo-bench``; see :mod:`dppo_bench.cli`."""
