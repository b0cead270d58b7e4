"""Run `erasure` with the audit commands wired in, as the lead will wire them in cli.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from erasure import cli
from erasure.audit.commands import add_audit_commands

Run = Callable[..., tuple[int, str, str]]


def wire_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `erasure.cli.main` know `audit` (no-op once cli.py adds it itself)."""
    original = cli._parser

    def parser() -> argparse.ArgumentParser:
        built = original()
        sub = next(a for a in built._actions if isinstance(a, argparse._SubParsersAction))
        if "audit" not in sub.choices:
            add_audit_commands(sub)
        return built

    monkeypatch.setattr(cli, "_parser", parser)


def runner(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    wire_audit(monkeypatch)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run
