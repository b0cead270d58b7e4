"""The lineage package's door: every name it exports resolves, and entering costs nothing."""

from __future__ import annotations

import subprocess
import sys

import erasure.lineage


def test_every_exported_name_resolves() -> None:
    for name in erasure.lineage.__all__:
        assert getattr(erasure.lineage, name) is not None, name


def test_entering_lineage_loads_no_heavy_library_until_a_name_is_asked_for() -> None:
    code = (
        "import sys, erasure.lineage; "
        "print(sorted(m for m in ('numpy', 'sqlglot', 'sqlalchemy', 'pydantic', 'msgspec') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
