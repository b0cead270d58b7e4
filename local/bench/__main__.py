"""Run the benchmarks: every `local/bench/<name>.py` with a `main()`, or only the names given."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path


def discover() -> dict[str, Callable[[], object]]:
    """Benchmark modules by name, in name order; a module without `main()` is a helper."""
    found: dict[str, Callable[[], object]] = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        entry = getattr(importlib.import_module(f"local.bench.{info.name}"), "main", None)
        if callable(entry):
            found[info.name] = entry
    return found


def main(argv: list[str]) -> int:
    benches = discover()
    unknown = sorted(set(argv) - set(benches))
    if unknown:
        print(
            f"unknown benchmark(s) {', '.join(unknown)}; have {', '.join(benches)}", file=sys.stderr
        )
        return 2
    for name in argv or list(benches):
        print(f"== bench.{name} ==", flush=True)
        benches[name]()
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
