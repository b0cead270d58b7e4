"""A generated estate the size of the one this system exists for (a helper, not a benchmark).

30,000 datasets: three Postgres root tables that hold the subject (`crm.customers`,
`crm.orders`, `crm.events`), one reference source, and 29,996 derived datasets in layers
(staging -> intermediate -> marts -> reports / ML), each written by one job that reported one
COMPLETE OpenLineage run event with column lineage (`fields` shape: DIRECT values plus
INDIRECT join keys), about 940,000 column edges in all. Upstreams are picked with a Zipf-like
skew, so the root tables feed about 94 % of the estate. The catalog (about 4 MB of YAML)
names every dataset with its kind, storage and how it is rebuilt; the derived datasets are
known only from run events, not in the warehouse.

`generate(directory, warehouse_url)` writes `catalog.yaml`, `lineage/events.jsonl` and the
root tables, and returns what a correct plan must say (`EstateFacts`).
"""

from __future__ import annotations

import bisect
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa

T = TypeVar("T")

SEED = 20261201
NAMESPACE = "warehouse"
ROOTS = ("crm.customers", "crm.orders", "crm.events")
REFERENCE = "ref.calendar"
SUBJECT = ("email", "subject@example.com")
LAYERS = (  # name, datasets, (fewest, most) upstreams, where upstreams come from
    ("stg", 6_000, (1, 2), (("src", 1.0),)),
    ("int", 9_000, (2, 4), (("stg", 0.7), ("int", 0.3))),
    ("mart", 8_000, (2, 5), (("int", 0.8), ("stg", 0.2))),
    ("rpt", 4_000, (1, 3), (("mart", 0.9), ("rpt", 0.1))),
    ("ml", 2_996, (2, 4), (("mart", 0.7), ("int", 0.3))),
)
SOURCE_WEIGHTS = {"crm.customers": 0.30, "crm.orders": 0.25, "crm.events": 0.15, REFERENCE: 0.30}
COLUMNS = (8, 16)  # per derived dataset
ROOT_COLUMNS = {
    "crm.customers": ["id", "email", "name", "region", "created_at"],
    "crm.orders": ["id", "customer_id", "amount", "status", "ordered_at"],
    "crm.events": ["id", "customer_id", "kind", "payload", "at"],
    REFERENCE: ["day", "week", "month", "holiday"],
}
PRODUCER = "https://github.com/apache/airflow/tree/providers-openlineage/2.20.3"
SCHEMA_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


@dataclass(frozen=True)
class EstateFacts:
    """What the generator knows the answer to."""

    catalog: Path
    events: Path
    datasets: int
    run_events: int
    column_edges: int
    reachable: frozenset[str]  # datasets downstream of the roots (roots excluded)
    action: dict[str, str]  # dataset -> the action a correct plan takes on it


def generate(
    directory: Path, warehouse_url: str, *, seed: int = SEED, scale: float = 1.0
) -> EstateFacts:
    """Write the estate under `directory` and its root tables into `warehouse_url`; `scale`
    shrinks every layer (a development run; 1.0 is the estate the numbers are about)."""
    rng = random.Random(seed)
    layers = tuple((name, max(1, round(n * scale)), *rest) for name, n, *rest in LAYERS)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "lineage").mkdir(exist_ok=True)
    names: dict[str, list[str]] = {"src": [*ROOTS, REFERENCE]}
    for layer, count, _, _ in layers:
        names[layer] = [f"{layer}.t{i:05d}" for i in range(count)]
    columns: dict[str, list[str]] = dict(ROOT_COLUMNS)
    popularity = {
        layer: list(accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(items))))
        for layer, items in names.items()
        if layer != "src"
    }
    popularity["src"] = list(accumulate(SOURCE_WEIGHTS[n] for n in names["src"]))
    upstreams: dict[str, list[str]] = {}
    edges = 0
    events_path = directory / "lineage" / "events.jsonl"
    with events_path.open("w") as out:
        for layer, _, (fewest, most), pools in layers:
            for position, target in enumerate(names[layer]):
                width = rng.randint(*COLUMNS)
                columns[target] = ["id"] + [f"c{j:02d}" for j in range(1, width)]
                ups = pick_upstreams(rng, layer, position, fewest, most, pools, names, popularity)
                if not ups:  # a first dataset of a self-feeding layer: read a source
                    ups = [names["src"][0]]
                upstreams[target] = ups
                event, count = _event(rng, target, ups, columns, position)
                edges += count
                out.write(json.dumps(event, separators=(",", ":")) + "\n")
    reachable = _reachable(upstreams)
    action = {name: _action(name) for name in reachable}
    catalog = directory / "catalog.yaml"
    catalog.write_text(_catalog_yaml(names, warehouse_url))
    _root_tables(warehouse_url, rng)
    return EstateFacts(
        catalog=catalog,
        events=events_path,
        datasets=sum(len(v) for v in names.values()),
        run_events=sum(n for _, n, _, _ in layers),
        column_edges=edges,
        reachable=frozenset(reachable),
        action=action,
    )


def pick_upstreams(
    rng: random.Random,
    layer: str,
    position: int,
    fewest: int,
    most: int,
    pools: Sequence[tuple[str, float]],
    names: Mapping[str, Sequence[T]],
    popularity: Mapping[str, list[float]],
    *,
    attempts: int = 4,
) -> list[T]:
    """Distinct upstreams drawn with a Zipf-like skew; same-layer picks only reach earlier
    datasets (no cycles). Also the closure bench's generator."""
    wanted = rng.randint(fewest, most)
    picked: dict[T, None] = {}
    for _ in range(wanted * attempts):
        if len(picked) >= wanted:
            break
        pool = rng.choices([p for p, _ in pools], weights=[w for _, w in pools])[0]
        limit = position if pool == layer else len(names[pool])
        if limit == 0:
            continue
        cum = popularity[pool]
        index = min(bisect.bisect_right(cum, rng.random() * cum[limit - 1], 0, limit), limit - 1)
        picked[names[pool][index]] = None
    return list(picked)


def _event(
    rng: random.Random,
    target: str,
    ups: list[str],
    columns: dict[str, list[str]],
    position: int,
) -> tuple[dict[str, object], int]:
    """One COMPLETE run event of the job that writes `target`, and its column edge count."""
    fields: dict[str, dict[str, object]] = {}
    count = 0
    for column in columns[target]:
        inputs = []
        for _ in range(1 if rng.random() < 0.75 else 2):
            up = rng.choice(ups)
            inputs.append(_input(up, rng.choice(columns[up]), "DIRECT", "TRANSFORMATION"))
        for up in ups[1:3]:  # the next inputs are joined on their keys
            inputs.append(_input(up, columns[up][0], "INDIRECT", "JOIN"))
        fields[column] = {"inputFields": inputs}
        count += len(inputs)
    layer = target.split(".")[0]
    run_id = f"01938000-{position:04x}-7000-8000-{abs(hash(target)) % 16**12:012x}"
    event = {
        "eventType": "COMPLETE",
        "eventTime": f"2026-11-{1 + position % 28:02d}T{position % 24:02d}:00:00Z",
        "producer": PRODUCER,
        "schemaURL": SCHEMA_URL,
        "run": {"runId": run_id},
        "job": {
            "namespace": "spark" if layer in ("stg", "int") else "airflow",
            "name": f"build_{target}",
        },
        "inputs": [{"namespace": NAMESPACE, "name": up} for up in ups],
        "outputs": [
            {
                "namespace": NAMESPACE,
                "name": target,
                "facets": {
                    "columnLineage": {
                        "_producer": PRODUCER,
                        "_schemaURL": "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json",
                        "fields": fields,
                    }
                },
            }
        ],
    }
    return event, count


def _input(dataset: str, field: str, kind: str, subtype: str) -> dict[str, object]:
    return {
        "namespace": NAMESPACE,
        "name": dataset,
        "field": field,
        "transformations": [{"type": kind, "subtype": subtype}],
    }


def _reachable(upstreams: dict[str, list[str]]) -> set[str]:
    downstream: dict[str, list[str]] = {}
    for target, ups in upstreams.items():
        for up in ups:
            downstream.setdefault(up, []).append(target)
    seen: set[str] = set()
    stack = list(ROOTS)
    while stack:
        for nxt in downstream.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _kind(name: str) -> tuple[str, str]:
    """(kind, storage) of a derived dataset, fixed by its name."""
    layer, number = name.split(".")[0], int(name.split(".t")[1])
    if layer == "ml":
        return ("model" if number % 2 else "embedding_index"), "mutable"
    if layer == "rpt":
        return "report", "mutable"
    if layer == "mart" and number % 50 == 7:
        return "backup", "immutable"
    if layer == "int" and number % 10 == 3:
        return "view", "mutable"
    return "table", "mutable"


def _action(name: str) -> str:
    kind, storage = _kind(name)
    if storage == "immutable":
        return "crypto_shred"
    if kind in ("model", "embedding_index"):
        return "escalate"
    return "rebuild"


def _catalog_yaml(names: dict[str, list[str]], warehouse_url: str) -> str:
    lines = [
        "version: 1",
        "k_threshold: 10",
        "identifiers:",
        "  email: {normalise: email}",
        "  customer_id: {normalise: strip}",
        "connections:",
        f"  warehouse: {{url: {json.dumps(warehouse_url)}}}",
        "lineage:",
        "  openlineage: [lineage/*.jsonl]",
        "datasets:",
        f"  - {{namespace: {NAMESPACE}, name: crm.customers, connection: warehouse, kind: table,"
        " holds_subject: {email: email, customer_id: id}, pii_columns: [email, name],"
        " owner: crm-team}",
        f"  - {{namespace: {NAMESPACE}, name: crm.orders, connection: warehouse, kind: table,"
        " holds_subject: {customer_id: customer_id}, owner: crm-team}",
        f"  - {{namespace: {NAMESPACE}, name: crm.events, connection: warehouse, kind: table,"
        " holds_subject: {customer_id: customer_id}, owner: crm-team}",
        f"  - {{namespace: {NAMESPACE}, name: {REFERENCE}, connection: warehouse, kind: table,"
        " owner: platform}",
    ]
    for layer, _, _, _ in LAYERS:
        for i, name in enumerate(names[layer]):
            kind, storage = _kind(name)
            lines.append(f"  - namespace: {NAMESPACE}")
            lines.append(f"    name: {name}")
            lines.append("    connection: warehouse")
            lines.append(f"    kind: {kind}")
            if storage == "immutable":
                lines.append("    storage: immutable")
                lines.append("    encryption: per_subject")
                lines.append("    retention_days: 35")
            elif kind in ("table", "report"):
                lines.append(f"    rebuild: {{dag_id: build_{layer}_{i % 40:02d}}}")
            lines.append(f"    owner: {layer}-team-{i % 25:02d}")
    return "\n".join(lines) + "\n"


def _root_tables(url: str, rng: random.Random, customers: int = 2_000) -> None:
    """The three root tables with the subject among other customers (one connection)."""
    engine = sa.create_engine(url, hide_parameters=True)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA IF EXISTS crm CASCADE")
            conn.exec_driver_sql("DROP SCHEMA IF EXISTS ref CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA crm")
            conn.exec_driver_sql("CREATE SCHEMA ref")
            conn.exec_driver_sql(
                "CREATE TABLE crm.customers (id TEXT PRIMARY KEY, email TEXT, name TEXT, "
                "region TEXT, created_at TEXT)"
            )
            conn.exec_driver_sql(
                "CREATE TABLE crm.orders (id TEXT PRIMARY KEY, customer_id TEXT REFERENCES "
                "crm.customers (id), amount NUMERIC, status TEXT, ordered_at TEXT)"
            )
            conn.exec_driver_sql(
                "CREATE TABLE crm.events (id TEXT PRIMARY KEY, customer_id TEXT REFERENCES "
                "crm.customers (id), kind TEXT, payload TEXT, at TEXT)"
            )
            conn.exec_driver_sql(
                "CREATE TABLE ref.calendar (day TEXT, week TEXT, month TEXT, holiday TEXT)"
            )
            people = [
                {"id": f"C{i:05d}", "email": f"person{i}@example.com", "name": f"P{i}",
                 "region": f"R{i % 7}", "created_at": "2026-01-01"}
                for i in range(customers)
            ]  # fmt: skip
            people[42]["email"] = SUBJECT[1]
            conn.execute(
                sa.text(
                    "INSERT INTO crm.customers VALUES (:id, :email, :name, :region, :created_at)"
                ),
                people,
            )
            orders = [
                {"id": f"O{i:06d}", "c": f"C{rng.randrange(customers):05d}", "a": i % 97}
                for i in range(customers * 3)
            ]
            orders += [{"id": "O-SUBJECT-1", "c": "C00042", "a": 10}]
            conn.execute(
                sa.text("INSERT INTO crm.orders VALUES (:id, :c, :a, 'paid', '2026-11-01')"),
                orders,
            )
            events = [{"id": f"E{i:06d}", "c": f"C{i % customers:05d}"} for i in range(customers)]
            conn.execute(
                sa.text("INSERT INTO crm.events VALUES (:id, :c, 'visit', '{}', '2026-11-01')"),
                events,
            )
    finally:
        engine.dispose()
