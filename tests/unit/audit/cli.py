"""Run `erasure` in this process, capturing what it prints."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from erasure import cli

Run = Callable[..., tuple[int, str, str]]


def runner(capsys: pytest.CaptureFixture[str]) -> Run:
    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run
