"""What the benchmarks share: one timed step, with its CPU seconds and its memory peak."""

from __future__ import annotations

import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    """One timed step: wall and process CPU seconds (every thread), and the RSS high-water
    mark while it ran."""

    seconds: float
    cpu_seconds: float
    peak_mib: float


class PeakRss:
    """The process's RSS high-water mark, reset before each step where Linux lets us."""

    def __init__(self) -> None:
        self.resettable = self._reset()
        self.how = (
            "RSS high-water mark (VmHWM), reset before each step via /proc/self/clear_refs"
            if self.resettable
            else "ru_maxrss (not resettable here: the process's peak so far)"
        )

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
        except OSError:
            return False
        return True

    def step(self, fn: Callable[[], T]) -> tuple[Step, T]:
        """`fn`'s result, timed, with the RSS high-water mark while it ran."""
        if self.resettable:
            self._reset()
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        return Step(time.perf_counter() - start, time.process_time() - cpu, self.mib()), result

    def mib(self) -> float:
        if self.resettable:
            with open("/proc/self/status") as handle:
                found = re.search(r"^VmHWM:\s+(\d+) kB", handle.read(), re.MULTILINE)
            if found:
                return int(found.group(1)) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
