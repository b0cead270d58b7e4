"""Benchmarks: `python -m local.bench [NAME ...]` runs every module here that defines `main()`."""
