"""The column-lineage conformance corpus: SQL snippets with the edges they must produce.

Cases live in `data/sql_corpus/<class>.yaml`, one file per class of input. An edge is written
`source -> target TYPE SUBTYPE`; `t.{a;b}` (on either side) stands for `t.a` and `t.b`, every
source to every target, and `s.{a;b} => t.{x;y}` pairs them (`s.a -> t.x`, `s.b -> t.y`). A
case may give `default_db` / `default_schema`, as `erasure lineage sql` takes them. A case is
*exact* when the set of (source, target, type) it produces equals the expected set,
and *strict* when the subtypes agree as well. Used by `test_sql_corpus.py` and
`local/bench/sql_lineage.py`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

CORPUS_DIR = Path(__file__).parent / "data" / "sql_corpus"

Edge = tuple[str, str, str, str]  # source, target, type, subtype

_EDGE = re.compile(
    r"^(?P<source>.+?) (?P<arrow>->|=>) (?P<target>.+) (?P<type>DIRECT|INDIRECT) (?P<subtype>\w+)$"
)
_BRACES = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class CorpusCase:
    """One SQL snippet and the edges it declares."""

    id: str
    klass: str
    sql: str
    dialect: str | None
    schema: dict[str, list[str]] | None
    edges: frozenset[Edge]
    default_db: str | None = None
    default_schema: str | None = None

    @property
    def name(self) -> str:
        return f"{self.klass}/{self.id}"


def expand(text: str) -> list[str]:
    """`t.{a;b}` -> [`t.a`, `t.b`]; text without braces stays one name."""
    parts = _BRACES.split(text)  # literal, choices, literal, choices, ...
    options = [[p] if i % 2 == 0 else p.split(";") for i, p in enumerate(parts)]
    return ["".join(choice) for choice in itertools.product(*options)]


def parse_edges(lines: Iterable[str]) -> frozenset[Edge]:
    edges: set[Edge] = set()
    for line in lines:
        match = _EDGE.match(line.strip())
        if match is None:
            raise ValueError(f"corpus edge {line!r} is not `source -> target TYPE SUBTYPE`")
        sources, targets = expand(match["source"]), expand(match["target"])
        if match["arrow"] == "=>":
            if len(sources) != len(targets):
                raise ValueError(f"corpus edge {line!r} pairs {len(sources)} with {len(targets)}")
            pairs = list(zip(sources, targets, strict=True))
        else:
            pairs = list(itertools.product(sources, targets))
        edges.update((s, t, match["type"], match["subtype"]) for s, t in pairs)
    return frozenset(edges)


def load_corpus(directory: Path = CORPUS_DIR) -> list[CorpusCase]:
    """Every case of every class file, in file and then case order."""
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        for entry in yaml.safe_load(path.read_text(encoding="utf-8")):
            cases.append(
                CorpusCase(
                    id=entry["id"],
                    klass=path.stem,
                    sql=entry["sql"],
                    dialect=entry.get("dialect"),
                    schema=entry.get("schema"),
                    edges=parse_edges(entry.get("edges") or []),
                    default_db=entry.get("default_db"),
                    default_schema=entry.get("default_schema"),
                )
            )
    names = [case.name for case in cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate corpus case ids: {', '.join(duplicates)}")
    return cases


def typed(edges: Iterable[Edge]) -> set[tuple[str, str, str]]:
    """Edges without their subtype: what *exact* compares."""
    return {(source, target, type_) for source, target, type_, _ in edges}


@dataclass
class ClassScore:
    cases: int = 0
    exact: int = 0
    strict: int = 0
    misses: list[str] = field(default_factory=list)


Runner = Callable[[CorpusCase], Iterable[Edge]]


def score(cases: Iterable[CorpusCase], run: Runner) -> dict[str, ClassScore]:
    """Exact and strict matches per class; a runner that raises misses the case."""
    scores: dict[str, ClassScore] = {}
    for case in cases:
        entry = scores.setdefault(case.klass, ClassScore())
        entry.cases += 1
        try:
            got = set(run(case))
        except Exception as error:  # a crash is a miss, and named as such
            entry.misses.append(f"{case.name} (raised {type(error).__name__})")
            continue
        if typed(got) == typed(case.edges):
            entry.exact += 1
            entry.strict += got == case.edges
        else:
            entry.misses.append(case.name)
    return scores


def total(scores: dict[str, ClassScore]) -> ClassScore:
    overall = ClassScore()
    for entry in scores.values():
        overall.cases += entry.cases
        overall.exact += entry.exact
        overall.strict += entry.strict
        overall.misses.extend(entry.misses)
    return overall
