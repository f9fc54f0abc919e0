"""Benchmarks CLI: regenerates the papers' tables (``python -m benchmarks --help``)."""
