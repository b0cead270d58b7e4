"""`make test`'s workers: the tests that share one thing run in one worker.

tests/conftest.py hands the groups to pytest-xdist's scheduler itself, because xdist's own
`xdist_group` marks are ignored with pytest >= 9.2 (pytest-dev/pytest-xdist#1386). The
second test says when that workaround can go.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

from tests.conftest import WORKER_GROUPS

SUITE = """
import os

import pytest


@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(8))
def test_grouped(i):
    print("WORKER", os.environ["PYTEST_XDIST_WORKER"])
"""


def _workers_of(tmp_path: Path, *args: str) -> set[str]:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(SUITE))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-v", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split()[0] for line in done.stdout.splitlines() if line.startswith("[gw")}


def test_every_group_is_a_path_of_this_suite() -> None:
    repo = Path(__file__).resolve().parents[2]
    by_group: dict[str, list[str]] = defaultdict(list)
    for prefix, group in WORKER_GROUPS.items():
        assert (repo / prefix).exists(), f"{prefix} is named in WORKER_GROUPS but does not exist"
        by_group[group].append(prefix)
    assert set(by_group) == {"e2e-stack", "reliability-doc", "dbt-project"}


def test_xdist_group_marks_are_still_ignored_so_the_conftest_scheduler_is_still_needed(
    tmp_path: Path,
) -> None:
    workers = _workers_of(tmp_path, "--dist", "loadgroup")
    assert len(workers) == 2, (
        "pytest-xdist honours xdist_group marks again (pytest-dev/pytest-xdist#1386 is fixed): "
        "mark the grouped tests with xdist_group, drop pytest_xdist_make_scheduler from "
        "tests/conftest.py and run make test with --dist loadgroup"
    )
