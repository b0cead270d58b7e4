"""Reach on the held-out column-lineage corpus: is every dependency a reader lists produced?

The held-out cases (`data/sql_reach/<family>.yaml`, the conformance corpus's format, read by
`sql_corpus.load_corpus`) were written from the SQL standard and the dialects' documented
syntax, not from the conformance corpus. A case is *reached* when every expected (source,
target) pair has an edge, DIRECT or INDIRECT: for erasure both are dependencies, and an extra
edge only over-approximates. *exact* (the conformance corpus's measure) is reported apart.
`data/sql_reach_review/` is a second such corpus, from a hostile review. Run
`python -m tests.unit.lineage.sql_reach` for the share per family and the cases missed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from erasure.lineage.sql import SqlLineage, sql_lineage
from tests.unit.lineage.sql_corpus import CorpusCase, Edge, load_corpus, typed

REACH_DIR = Path(__file__).parent / "data" / "sql_reach"
# A second held-out corpus, 175 statements a hostile reviewer wrote against the first's fixes.
REVIEW_DIR = Path(__file__).parent / "data" / "sql_reach_review"


def run(case: CorpusCase) -> SqlLineage:
    return sql_lineage(
        case.sql,
        dialect=case.dialect,
        schema=case.schema,
        default_db=case.default_db,
        default_schema=case.default_schema,
    )


def edges_of(lineage: SqlLineage) -> set[Edge]:
    return {(e.source, e.target, e.type.value, e.subtype.value) for e in lineage.edges}


def missed(case: CorpusCase, got: set[Edge]) -> list[tuple[str, str]]:
    """The expected (source, target) pairs no produced edge joins, of either type."""
    produced = {(source, target) for source, target, _, _ in got}
    expected = sorted({(source, target) for source, target, _, _ in case.edges})
    return [pair for pair in expected if pair not in produced]


@dataclass
class FamilyReach:
    cases: int = 0
    reached: int = 0
    exact: int = 0
    misses: list[str] = field(default_factory=list)


def reach(cases: list[CorpusCase]) -> dict[str, FamilyReach]:
    """Reached and exact cases per family (class file)."""
    families: dict[str, FamilyReach] = {}
    for case in cases:
        family = families.setdefault(case.klass, FamilyReach())
        family.cases += 1
        got = edges_of(run(case))
        lost = missed(case, got)
        if lost:
            shown = ", ".join(f"{s} -> {t}" for s, t in lost[:4])
            family.misses.append(f"{case.name}: {shown}{' ...' if len(lost) > 4 else ''}")
        else:
            family.reached += 1
        family.exact += typed(got) == typed(case.edges)
    return families


def _main() -> None:
    for directory in (REACH_DIR, REVIEW_DIR):
        print(directory.name)
        _report(load_corpus(directory))


def _report(cases: list[CorpusCase]) -> None:
    started = time.perf_counter()
    families = reach(cases)
    elapsed = time.perf_counter() - started
    total = FamilyReach()
    for name, family in sorted(families.items()):
        print(
            f"{name:32} reached {family.reached:3}/{family.cases:<3} "
            f"({family.reached / family.cases:6.1%})  exact {family.exact:3}/{family.cases}"
        )
        total.cases += family.cases
        total.reached += family.reached
        total.exact += family.exact
        total.misses.extend(family.misses)
    print(
        f"{'total':32} reached {total.reached:3}/{total.cases:<3} "
        f"({total.reached / total.cases:6.1%})  exact {total.exact:3}/{total.cases}"
        f"  in {elapsed:.2f}s"
    )
    for miss in total.misses:
        print(f"  miss {miss}")


if __name__ == "__main__":
    _main()
