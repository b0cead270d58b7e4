"""Benchmarks: `python -m bench [NAME ...]` runs every module here that defines `main()`."""
