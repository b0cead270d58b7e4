"""Sections of a generated page (docs/reliability.md) that different tests write: each test
owns the text between its markers and rewrites only that."""

from __future__ import annotations

import re
from pathlib import Path


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- section {name}: begin -->\n", f"<!-- section {name}: end -->\n"


def publish(doc: Path, name: str, text: str) -> bool:
    """Put `text` into `doc` as section `name` (appended if new); whether the file changed."""
    begin, end = _markers(name)
    old = doc.read_text() if doc.exists() else ""
    section = begin + text.rstrip("\n") + "\n" + end
    found = re.search(re.escape(begin) + r".*?" + re.escape(end), old, re.DOTALL)
    if found:
        new = old[: found.start()] + section + old[found.end() :]
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + section
    if new == old:
        return False
    doc.write_text(new)
    return True
