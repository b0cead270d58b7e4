"""A discovery as a person reads it: sections by status, counts and names, never a value."""

from __future__ import annotations

from erasure.discover.findings import Discovery, Finding, Status
from erasure.model import DatasetRef

_SECTIONS = (
    (Status.PROPOSED, "Proposed: not in the catalog's holds_subject (review each)"),
    (Status.NAME_ONLY, "Named like identifiers, but the sampled values are not (not proposed)"),
    (
        Status.VALUES_ONLY,
        "Values are ids of a declared key, but the name does not say whose (not proposed)",
    ),
    (
        Status.OTHER_PARTY,
        "Another party's, by its name (not proposed: a request by that party would erase "
        "these rows)",
    ),
    (Status.DECLARED_OTHER, "Declared as another identifier type, but the values read as this"),
    (Status.BELOW_SHARE, "Some values read as identifiers, below the share (not proposed)"),
)


def render_discovery(report: Discovery) -> str:
    """The report as a person reads it: counts and names, never a value."""
    out = [
        f"Connection {report.connection!r} ({report.dialect}): {report.tables} table(s) in "
        f"{len(report.schemas)} schema(s) ({', '.join(report.schemas) or 'none'}), "
        f"{report.columns} column(s) of a text, number or uuid type; at most {report.sample_rows} "
        f"row(s) sampled per table; a column is proposed by its values when at least "
        f"{report.min_share:.0%} of its sampled values read as the type.",
    ]
    for status, title in _SECTIONS:
        found = report.having(status)
        if not found:
            if status is Status.PROPOSED:
                out += [
                    "",
                    "Proposed: nothing; every column that looks like an identifier is declared.",
                ]
            continue
        out += ["", f"{title}:"]
        width = max(len(f.column) for f in found)
        type_width = max(len(f.identifier_type) for f in found)
        dataset: DatasetRef | None = None
        for f in found:
            if f.dataset != dataset:
                dataset = f.dataset
                out.append(f"  {f.dataset.name}  ({_described(f)})")
            rows = f"; {f.rows_sampled} row(s) sampled" if f.rows_sampled else ""
            out.append(
                f"    {f.column:<{width}}  {f.identifier_type:<{type_width}}  {f.evidence}{rows}"
            )
    declared = report.having(Status.DECLARED)
    if declared:
        by_dataset: dict[str, list[str]] = {}
        for f in declared:
            by_dataset.setdefault(f.dataset.name, []).append(f"{f.column} ({f.identifier_type})")
        listed = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in by_dataset.items())
        out += ["", f"Already declared: {len(declared)} column(s): {listed}"]
        others = [f for f in declared if f.other_party]
        if others:
            out += ["", "Declared, but the name says another party's (check the catalog):"]
            out += [
                f"  {f.dataset.name}.{f.column}  {f.identifier_type}  ({f.other_party}): a "
                "request by that party's identifier erases these rows; move it to `references` "
                "or out of holds_subject"
                for f in others
            ]
    if report.notes:
        out += ["", "Notes:"] + [f"  {note}" for note in report.notes]
    out += ["", "Catalog entries to review, then paste:", "", report.catalog_yaml.rstrip()]
    return "\n".join(out)


def _described(f: Finding) -> str:
    if f.catalogued:
        return f"in the catalog: {f.handled_as}"
    if f.described_by is not None:
        return f"no entry of its own; {f.described_by}: {f.handled_as}"
    return "not in the catalog"
