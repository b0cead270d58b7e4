"""This checkout's entry points, for an environment whose installed metadata predates them.

Airflow finds the erasure plugin by its `airflow.plugins` entry point (pyproject.toml), which
exists once the package is installed (`pip install -e .`). A virtualenv installed from an
older checkout, or from another worktree, lacks it; the stack and the tests then put a small
`.dist-info` declaring the missing entry points on the path, beside the checkout itself, so
every Airflow component loads the plugin from this checkout. Reinstalling makes it needless.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIST_NAME = "erasure_checkout_entry_points"


def declared(pyproject: Path = REPO / "pyproject.toml") -> dict[str, dict[str, str]]:
    """The entry points pyproject.toml declares: {group: {name: "module:attribute"}}."""
    project = tomllib.loads(pyproject.read_text())["project"]
    groups: dict[str, dict[str, str]] = dict(project.get("entry-points", {}))
    return groups


def missing(groups: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Those of `groups` the installed distributions do not declare with the same target."""
    lacking: dict[str, dict[str, str]] = {}
    for group, entries in groups.items():
        installed = {(ep.name, ep.value) for ep in metadata.entry_points(group=group)}
        absent = {n: v for n, v in entries.items() if (n, v) not in installed}
        if absent:
            lacking[group] = absent
    return lacking


def metadata_for_checkout(into: Path) -> Path | None:
    """A directory to put on sys.path whose `.dist-info` declares this checkout's entry points
    the installed metadata lacks; None when nothing is missing."""
    lacking = missing(declared())
    if not lacking:
        return None
    dist_info = into / f"{DIST_NAME}-0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: 0\n")
    lines = []
    for group, entries in lacking.items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in entries.items()]
        lines.append("")
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    return into
