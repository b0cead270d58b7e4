"""The `erasure` command. `--json` prints machine-readable output on stdout; errors go to
stderr with a non-zero exit and never echo a subject identifier.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, cast

from pydantic import SecretStr

from erasure.errors import ErasureError
from erasure.model import REQUEST_REF, DatasetRef, Plan, SubjectRef

EXIT_ERROR = 2
EXIT_DRIFT = 3  # the plan was made, but the catalog does not describe the warehouse

Handler = Callable[[argparse.Namespace], int]


_QUOTED_VALUE = re.compile(
    r"""(invalid choice|invalid \S+ value): (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
)


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error never repeats what was typed: an argument may be
    an identifier given in the wrong place (`erasure plan --subject x jane@example.org`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviated options: argparse repeats an ambiguous one whole, value included.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            message = "unrecognized arguments (not repeated here); see --help"
        else:
            # argparse quotes a bad value with repr(): the value goes, the reason stays.
            message = _QUOTED_VALUE.sub(r"\1", message)
        super().error(message)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return handler(args)
    except ErasureError as exc:
        print(f"erasure: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line; the audit, keys and store groups (and what they import) only when
    `argv` may name one: a command outside them starts that much faster."""
    parser = _Parser(
        prog="erasure", description="GDPR Art. 17 erasure: lineage closure, plan, proofs."
    )
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(metavar="COMMAND", parser_class=_Parser),
    )

    demo = sub.add_parser("demo", help="build the demo estate and plan an erasure over it")
    demo.add_argument(
        "--dir",
        type=Path,
        default=Path("var/demo-plan"),
        help="where to build it (make demo's own estate in var/demo is left alone)",
    )
    demo.add_argument("--json", action="store_true", help="print the plan as JSON")
    demo.set_defaults(handler=_demo)

    plan = sub.add_parser("plan", help="locate a subject and plan their erasure")
    plan.add_argument("--catalog", type=Path, required=True, help="catalog YAML file")
    plan.add_argument(
        "--subject",
        required=True,
        metavar="TYPE=VALUE",
        help="identifier type and value; VALUE '-' reads it from stdin (kept out of ps/history)",
    )
    plan.add_argument(
        "--max-nodes", type=_positive, default=None, help="bound on the closure size (1 or more)"
    )
    plan.add_argument(
        "--at",
        type=_instant,
        default=None,
        metavar="TIME",
        help="plan over the lineage as it was at TIME (ISO 8601; default: the current lineage)",
    )
    _store_argument(plan)
    plan.add_argument("--json", action="store_true")
    plan.set_defaults(handler=_plan)

    lineage = sub.add_parser("lineage", help="inspect lineage").add_subparsers(metavar="WHAT")
    sql = lineage.add_parser("sql", help="column lineage of a SQL script")
    sql.add_argument("file", nargs="?", default="-", help="SQL file, or - for stdin")
    sql.add_argument("--dialect", default=None, help="sqlglot dialect (default: generic ANSI)")
    sql.add_argument("--schema", type=Path, default=None, help="JSON: table -> [columns]")
    sql.add_argument(
        "--default-db",
        default=None,
        metavar="D",
        help="complete table names with this database (BigQuery: project, Spark: catalog)",
    )
    sql.add_argument(
        "--default-schema",
        default=None,
        metavar="S",
        help="complete table names with this schema (BigQuery: dataset)",
    )
    sql.add_argument("--json", action="store_true", help="accepted; the output is always JSON")
    sql.set_defaults(handler=_lineage_sql)

    closure = lineage.add_parser("closure", help="forward closure from datasets")
    closure.add_argument("--catalog", type=Path, required=True)
    closure.add_argument(
        "--from",
        dest="roots",
        action="append",
        required=True,
        metavar="DATASET",
        help="root dataset name (repeatable)",
    )
    closure.add_argument(
        "--max-nodes", type=_positive, default=None, help="bound on the closure size (1 or more)"
    )
    closure.add_argument(
        "--max-depth", type=_count, default=None, help="edges from a root (0: the roots alone)"
    )
    closure.add_argument(
        "--at",
        type=_instant,
        default=None,
        metavar="TIME",
        help="the closure over the lineage valid at TIME (ISO 8601), e.g. a plan's lineage_as_of",
    )
    _store_argument(closure)
    closure.add_argument("--json", action="store_true")
    closure.set_defaults(handler=_lineage_closure)

    ingest = lineage.add_parser(
        "ingest", help="store OpenLineage run-event files in the erasure store (idempotent)"
    )
    ingest.add_argument("files", nargs="+", type=Path, help="JSON-lines or JSON array files")
    ingest.add_argument(
        "--dry-run", action="store_true", help="only parse and summarise; store nothing"
    )
    ingest.add_argument(
        "--workers",
        type=_count,
        default=None,
        metavar="N",
        help="processes that decode, hash and validate a large JSON-lines file while this one "
        "writes (default: one per core, at most 4; 0: read it in this process, as on a busy "
        "machine)",
    )
    _store_argument(ingest)
    ingest.add_argument("--json", action="store_true")
    ingest.set_defaults(handler=_lineage_ingest)

    status = lineage.add_parser("status", help="what the lineage store holds, and quarantine")
    _store_argument(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_lineage_status)

    purge = lineage.add_parser(
        "purge", help="delete raw events, runs and superseded edges older than the retention"
    )
    purge.add_argument(
        "--retention-days",
        type=_positive,
        default=None,
        help="default: ERASURE_LINEAGE_RETENTION_DAYS (400)",
    )
    _store_argument(purge)
    purge.add_argument("--json", action="store_true")
    purge.set_defaults(handler=_lineage_purge)

    catalog = sub.add_parser("catalog", help="the catalog").add_subparsers(metavar="WHAT")
    discover = catalog.add_parser(
        "discover",
        help="propose holds_subject entries: columns that look like identifiers (counts only)",
    )
    discover.add_argument("--catalog", type=Path, required=True, help="catalog YAML file")
    discover.add_argument(
        "--connection", required=True, metavar="NAME", help="a connection of the catalog"
    )
    discover.add_argument(
        "--schema",
        dest="schemas",
        action="append",
        default=None,
        metavar="S",
        help="search this schema only (repeatable; default: every schema but the system's, and "
        "those whose names could be identifiers)",
    )
    discover.add_argument(
        "--exclude-schema",
        dest="exclude_schemas",
        action="append",
        default=[],
        metavar="S",
        help="leave this schema out (repeatable)",
    )
    discover.add_argument(
        "--sample",
        type=_sample_rows,
        default=None,
        metavar="N",
        help="rows read from each table, at most (default 1,000; up to 100,000)",
    )
    discover.add_argument(
        "--min-share",
        type=_share,
        default=None,
        metavar="SHARE",
        help="share of a column's sampled values that must read as a type to propose it by "
        "its values (above 0, at most 1; default 0.5)",
    )
    discover.add_argument("--json", action="store_true")
    discover.set_defaults(handler=_catalog_discover)

    suppression = sub.add_parser("suppression", help="the suppression list (tombstones)")
    check = suppression.add_subparsers(metavar="WHAT").add_parser(
        "check", help="is this identifier suppressed? (exit 0 yes, 1 no)"
    )
    check.add_argument(
        "subject", metavar="TYPE=VALUE", help="VALUE '-' reads it from stdin (kept out of ps)"
    )
    check.add_argument("--catalog", type=Path, default=None, help="default: ERASURE_CATALOG_PATH")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=_suppression_check)

    requests = sub.add_parser("requests", help="erasure requests").add_subparsers(metavar="WHAT")
    confirm = requests.add_parser(
        "confirm-deletion",
        help="record that an artefact's owner deleted the person where erasure cannot reach",
    )
    confirm.add_argument("request_ref")
    confirm.add_argument("dataset", help="the escalated artefact, as NAME or NAMESPACE/NAME")
    confirm.add_argument("--by", required=True, help="who confirmed it (the owner)")
    confirm.add_argument("--note", required=True, help="how it was done (ticket, change id)")
    confirm.set_defaults(handler=_requests_confirm_deletion)

    restore = sub.add_parser(
        "restore", help="after restoring a backup: erase its erased subjects again"
    ).add_subparsers(metavar="WHAT")
    replay = restore.add_parser(
        "replay",
        help="erase again the rows of a restored table that hash to a tombstone, and record it",
    )
    replay.add_argument("--dataset", required=True, metavar="NAME", help="the restored table")
    replay.add_argument(
        "--namespace", default=None, metavar="NS", help="its namespace, if the name is ambiguous"
    )
    replay.add_argument("--catalog", type=Path, default=None, help="default: ERASURE_CATALOG_PATH")
    replay.add_argument("--json", action="store_true")
    replay.set_defaults(handler=_restore_replay)

    command = next((word for word in argv if not word.startswith("-")), None)
    if command in sub.choices:
        return parser  # one of the commands above; help and the groups need the groups
    from erasure.audit.commands import add_audit_commands
    from erasure.provision import add_keys_commands
    from erasure.store.commands import add_store_commands

    add_audit_commands(sub)
    add_keys_commands(sub)
    add_store_commands(sub)
    return parser


def _subject(text: str) -> SubjectRef:
    id_type, sep, value = text.partition("=")
    if not sep or not id_type:
        raise ErasureError(
            "--subject must be TYPE=VALUE, e.g. email=- to read the value from stdin"
        )
    if value == "-":
        value = sys.stdin.readline().rstrip("\n")
    return SubjectRef(type=id_type.strip(), value=SecretStr(value))


def _checked_subject(catalog: Any, subject: SubjectRef) -> SubjectRef:
    """The desk's checks of a typed identifier (`erasure.submission`, `identifier_types`):
    not blank, at most 512 characters, valid text, and of the type given; never repeated."""
    from erasure.identifier_types import refuse_misfit
    from erasure.submission import identifier_problem

    value = subject.value.get_secret_value()
    try:
        identifier_problem(value)
    except ValueError as exc:
        raise ErasureError(f"--subject: the identifier {exc}") from None
    refuse_misfit(catalog.identifiers, subject.type, value)
    return subject


def _store_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="the erasure store holding the lineage (default: ERASURE_STORE_URL)",
    )


# Bounds, not arithmetic: a count past this is a typo (and int() of a 5,000-digit text is slow).
_MAX_COUNT = 10**9


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text[:12]) > _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {_MAX_COUNT:,}")
    return int(text)


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text[:12]) <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {_MAX_COUNT:,}")
    return int(text)


def _sample_rows(text: str) -> int:
    from erasure.discover import MAX_SAMPLE_ROWS

    if not (text.isascii() and text.isdigit()) or not 1 <= int(text[:12]) <= MAX_SAMPLE_ROWS:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_SAMPLE_ROWS:,}")
    return int(text)


def _share(text: str) -> float:
    try:
        value = float(text[:32])
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError("must be a number above 0 and at most 1, e.g. 0.5")
    return value


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "must be an ISO 8601 time such as 2026-11-29T12:00:00+00:00"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _open_lineage(args: argparse.Namespace) -> Any:
    from erasure.config import Settings
    from erasure.lineage import LineageStore
    from erasure.store.database import open_store

    return LineageStore(open_store(args.store or Settings().store_url))


def _plan(args: argparse.Namespace) -> int:
    from erasure.catalog import load_catalog
    from erasure.planner import make_plan

    catalog = load_catalog(args.catalog)
    subject = _checked_subject(catalog, _subject(args.subject))
    kwargs: dict[str, Any] = {} if args.max_nodes is None else {"max_nodes": args.max_nodes}
    lineage = _open_lineage(args)
    try:
        plan = make_plan(catalog, subject, lineage_store=lineage, as_of=args.at, **kwargs)
    finally:
        lineage.store.close()
    _emit_plan(plan, args.json)
    return _drift_status(plan)


def _demo(args: argparse.Namespace) -> int:
    from erasure.planner import make_plan
    from erasure.sample.seed import DEMO_SUBJECT, build_demo

    catalog = build_demo(args.dir)
    id_type, value = DEMO_SUBJECT
    if not args.json:
        print(f"Demo estate built in {args.dir} ({len(catalog.datasets)} catalogued datasets).")
        print(f"Planning the erasure of the demo customer, located by {id_type}.\n")
    plan = make_plan(catalog, SubjectRef(type=id_type, value=SecretStr(value)))
    _emit_plan(plan, args.json)
    return _drift_status(plan)


def _drift_status(plan: Plan) -> int:
    """EXIT_DRIFT, each drift said on stderr, when the catalog does not describe the warehouse:
    the datasets concerned escalate, and no request on this catalog can complete."""
    from erasure.model import GapKind

    drift = [g for g in plan.gaps if g.kind is GapKind.CATALOG_DRIFT]
    for gap in drift:
        print(f"erasure: catalog drift: {gap.detail}", file=sys.stderr)
    return EXIT_DRIFT if drift else 0


def _emit_plan(plan: Plan, as_json: bool) -> None:
    if as_json:
        print(plan.model_dump_json(indent=2))
    else:
        from erasure.report import render_plan

        print(render_plan(plan))


def _lineage_sql(args: argparse.Namespace) -> int:
    from erasure.lineage import sql_lineage

    if args.file == "-":
        raw = getattr(sys.stdin, "buffer", None)  # bytes, decoded here: a clear error
        script = sys.stdin.read() if raw is None else _text(raw.read(), "standard input")
    else:
        script = _read(Path(args.file))
    schema = None
    if args.schema is not None:
        try:
            schema = json.loads(_read(args.schema))
        except json.JSONDecodeError as exc:
            raise ErasureError(
                f"{args.schema}: not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        if not isinstance(schema, dict) or not all(isinstance(v, list) for v in schema.values()):
            raise ErasureError(f"{args.schema}: must map table name -> list of column names")
    lineage = sql_lineage(
        script,
        dialect=args.dialect,
        schema=schema,
        default_db=args.default_db,
        default_schema=args.default_schema,
    )
    print(json.dumps(lineage.as_json(), indent=2))
    return 0


def _lineage_closure(args: argparse.Namespace) -> int:
    from erasure.catalog import load_catalog
    from erasure.lineage import build_lineage
    from erasure.planner import materialised_predicate
    from erasure.warehouse import Warehouse

    catalog = load_catalog(args.catalog)
    roots: list[DatasetRef] = []
    for name in args.roots:
        roots.append(catalog.by_name(name).ref)
    warehouse = Warehouse(catalog)
    store = _open_lineage(args)
    try:
        lineage = build_lineage(catalog, warehouse, store=store, as_of=args.at)
    finally:
        warehouse.dispose()
        store.store.close()
    closure = lineage.graph.forward_closure(
        roots,
        max_nodes=args.max_nodes,
        max_depth=args.max_depth,
        as_of=args.at,
        is_materialised=materialised_predicate(catalog),
    )
    datasets: list[dict[str, Any]] = [
        {
            **ref.as_dict(),
            "depth": closure.depth.get(ref, 0),
            "catalogued": catalog.dataset(ref) is not None,
            "upstreams": sorted(u.name for u in closure.upstreams.get(ref, set())),
        }
        for ref in closure.datasets
    ]
    doc = {
        "roots": [r.as_dict() for r in roots],
        "datasets": datasets,
        "truncated": closure.truncated,
        "truncated_at": [r.as_dict() for r in closure.truncated_at],
        "cycles": [c.model_dump(mode="json") for c in closure.cycles],
        "lineage_snapshot": lineage.graph.snapshot_id(),
        "as_of": None if args.at is None else args.at.isoformat(),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    at = "" if args.at is None else f" as of {args.at.isoformat()}"
    print(
        f"Forward closure from {', '.join(r.name for r in roots)}{at}: "
        f"{len(closure.datasets)} dataset(s){' (TRUNCATED)' if closure.truncated else ''}"
    )
    for entry in datasets:
        mark = "" if entry["catalogued"] else "  [not in catalog]"
        ups = ", ".join(entry["upstreams"]) or "-"
        print(f"  {'  ' * entry['depth']}{entry['name']}  <- {ups}{mark}")
    for cycle in closure.cycles:
        print(f"  cycle ({cycle.kind}): {cycle.names()}")
    return 0


def _catalog_discover(args: argparse.Namespace) -> int:
    from erasure.catalog import load_catalog
    from erasure.discover import discover, render_discovery
    from erasure.warehouse import Warehouse

    catalog = load_catalog(args.catalog)
    options: dict[str, Any] = {}
    if args.sample is not None:
        options["sample_rows"] = args.sample
    if args.min_share is not None:
        options["min_share"] = args.min_share
    warehouse = Warehouse(catalog)
    try:
        report = discover(
            catalog,
            warehouse,
            args.connection,
            schemas=args.schemas,
            exclude_schemas=args.exclude_schemas,
            **options,
        )
    finally:
        warehouse.dispose()
    print(report.model_dump_json(indent=2) if args.json else render_discovery(report))
    return 0


def _lineage_ingest(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _lineage_ingest_dry_run(args)
    from erasure.lineage import IngestReport, default_workers

    workers = default_workers() if args.workers is None else args.workers
    lineage = _open_lineage(args)
    started = time.perf_counter()
    report = IngestReport()
    try:
        for path in args.files:
            report.merge(lineage.ingest_file(path, workers=workers))
        if report.stored:
            lineage.refresh_index_if_due()  # so the next plan finds the index built
        written = {name for run in report.touched for name in run.pop("output_names")}
        gaps = [g for g in lineage.output_gaps() if g.dataset in written]
    finally:
        lineage.store.close()
    seconds = time.perf_counter() - started
    errors = [str(r["error"]) for r in report.results if "error" in r]
    doc = {
        "events": report.received,
        "stored": report.stored,
        "duplicates": report.duplicates,
        "quarantined": report.quarantined,
        "runs": report.touched,
        "edges": report.edges_opened,
        "edges_closed": report.edges_closed,
        "gaps": [g.model_dump(mode="json") for g in gaps],
        "seconds": round(seconds, 3),
        "errors": errors,
    }
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    rate = report.received / seconds if seconds > 0 else 0.0
    print(
        f"{report.received} event(s): {report.stored} new, {report.duplicates} already stored, "
        f"{report.quarantined} quarantined; {report.runs} run(s) updated, "
        f"{report.edges_opened} edge(s) opened, {report.edges_closed} superseded "
        f"({seconds:.1f} s, {rate:,.0f} events/s)"
    )
    for error in errors:
        print(f"  quarantined: {error}")
    for gap in gaps:
        print(f"  gap {gap.kind.value}: {gap.detail}")
    return 0


def _lineage_ingest_dry_run(args: argparse.Namespace) -> int:
    from erasure.lineage import edges_from_events, read_event_file

    events = [event for path in args.files for event in read_event_file(path)]
    observed = edges_from_events(events)
    runs: list[dict[str, Any]] = [
        {
            "run_id": r.run_id,
            "job": r.job,
            "state": r.state,
            "outputs": [f"{o.namespace}/{o.name}" for o in r.outputs],
        }
        for r in observed.runs
    ]
    doc = {
        "events": len(events),
        "stored": 0,
        "duplicates": 0,
        "runs": runs,
        "edges": len(observed.edges),
        "gaps": [g.model_dump(mode="json") for g in observed.gaps],
    }
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        return 0
    print(
        f"{len(events)} event(s) parsed (dry run); {len(runs)} run(s), "
        f"{len(observed.edges)} edge(s)"
    )
    for run in runs:
        print(f"  {run['state']:<9} {run['job']}  -> {', '.join(run['outputs']) or '-'}")
    for gap in observed.gaps:
        print(f"  gap {gap.kind.value}: {gap.detail}")
    return 0


def _lineage_status(args: argparse.Namespace) -> int:
    lineage = _open_lineage(args)
    try:
        counts = lineage.counts()
        quarantined = lineage.quarantined(limit=10)
    finally:
        lineage.store.close()
    if args.json:
        doc = {**counts, "recent_quarantine": [q.model_dump(mode="json") for q in quarantined]}
        print(json.dumps(doc, indent=2))
        return 0
    print(
        f"{counts['events']:,} event(s), {counts['runs']:,} run(s), {counts['edges']:,} edge "
        f"interval(s) ({counts['current_edges']:,} current) over {counts['datasets']:,} "
        f"dataset(s), {counts['sources']:,} lineage source(s); "
        f"{counts['quarantined']:,} quarantined; projection version {counts['version']}"
    )
    for q in quarantined:
        print(f"  quarantined {q.received_at:%Y-%m-%d %H:%M:%S} {q.origin}: {q.reason}")
    return 0


def _lineage_purge(args: argparse.Namespace) -> int:
    from erasure.config import Settings

    days = args.retention_days or Settings().lineage_retention_days
    lineage = _open_lineage(args)
    try:
        report = lineage.purge(days)
    finally:
        lineage.store.close()
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    print(
        f"purged lineage older than {report.cutoff:%Y-%m-%d} ({days} days): "
        f"{report.events:,} event(s), {report.runs:,} run(s), {report.edges:,} superseded "
        f"edge(s), {report.quarantined:,} quarantined"
    )
    return 0


def _requests_confirm_deletion(args: argparse.Namespace) -> int:
    from erasure import workflow
    from erasure.config import Settings
    from erasure.services import Services

    # What was typed is not repeated: it may be an identifier put in the wrong place.
    unknown = ErasureError(
        "no erasure request with that reference is registered: check the reference "
        "(`erasure audit list` lists the requests on record)"
    )
    if not REQUEST_REF.match(args.request_ref):
        raise unknown
    with Services.open(Settings()) as svc:
        if svc.requests.get(args.request_ref) is None:
            raise unknown
        plan = svc.plans.get(args.request_ref, 1)
        named = [
            i.dataset for i in plan.items if args.dataset in (i.dataset.name, i.dataset.qualified)
        ]
        if len(named) != 1:
            raise ErasureError(
                f"the request's plan has {len(named) or 'no'} artefact(s) of that name: give "
                "the dataset as NAMESPACE/NAME, as the plan names it"
            )
        evidence = workflow.confirm_deletion(svc, args.request_ref, named[0], args.by, args.note)
    deletion = evidence.deletion or {}
    print(
        f"{args.request_ref}: deletion of {named[0].name} confirmed by {deletion['confirmed_by']} "
        f"at {deletion['confirmed_at']}; clear the request's verify task to complete it"
    )
    return 0


def _restore_replay(args: argparse.Namespace) -> int:
    from erasure.config import Settings
    from erasure.replay import dataset_named, render_replay, replay
    from erasure.services import Services

    settings = Settings()
    if args.catalog is not None:
        settings = settings.model_copy(update={"catalog_path": args.catalog})
    with Services.open(settings) as svc:
        done = replay(svc, dataset_named(svc.catalog, args.dataset, args.namespace))
    record, body = done.record, done.body
    if args.json:
        doc = {
            "replay_ref": record.request_ref,
            "resumed": done.resumed,
            "record": record.model_dump(mode="json", exclude={"body"}),
            "body": record.body,
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(render_replay(record, body, resumed=done.resumed))
    return 0


def _suppression_check(args: argparse.Namespace) -> int:
    from erasure.catalog import load_catalog
    from erasure.config import Settings
    from erasure.keys.pepper import PepperStore
    from erasure.keys.vault import connect
    from erasure.store.database import open_store
    from erasure.suppression import check_subject

    settings = Settings()
    subject = _subject(args.subject)
    path = args.catalog or settings.catalog_path
    if path is None:
        raise ErasureError("give --catalog or set ERASURE_CATALOG_PATH")
    catalog = load_catalog(path)
    subject = _checked_subject(catalog, subject)
    peppers = PepperStore(connect(settings), settings.vault_kv_mount).all_versions()
    with open_store(settings.store_url) as store:
        found = check_subject(
            store, catalog, subject.type, subject.value.get_secret_value(), peppers
        )
    if args.json:
        print(
            json.dumps(
                {
                    "suppressed": bool(found),
                    "tombstones": [t.model_dump(mode="json") for t in found],
                },
                indent=2,
            )
        )
    elif found:
        for stone in found:
            print(
                f"suppressed: {stone.identifier_type} {stone.subject_hash[:16]}… pepper "
                f"v{stone.pepper_version}, since {stone.created_at:%Y-%m-%d}"
                + (f" (request {stone.request_ref})" if stone.request_ref else "")
            )
    else:
        print(f"not suppressed: no tombstone for this {subject.type}")
    return 0 if found else 1


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ErasureError(f"{path}: cannot read ({exc.strerror})") from None
    return _text(data, str(path))


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ErasureError(
            f"{where}: not UTF-8 text (byte {exc.start} cannot be decoded); save it as UTF-8"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
