"""Plans and closures over the lineage store at the size of a real estate, each number beside
its baseline.

On a generated 30,000-dataset estate (`local.bench.estate`: ~30k run events, ~940k column edges,
three Postgres root tables, a ~4 MB catalog) in a throwaway Postgres database, loaded with
`erasure lineage ingest` (its rates are `bench.lineage_ingest`'s to measure):

- `erasure plan` with default flags (whole process): wall time, peak RSS, and exactness
  against what the generator knows; beside it the plan without a store (every event file
  parsed per plan, as before the store);
- forward closure from the store's index, p50/p95, against networkx on the same pairs.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import networkx as nx
import psycopg

from local.bench.estate import NAMESPACE, ROOTS, SUBJECT, EstateFacts, generate
from local.bench.lineage_ingest import Stream, cli_ingest, measured

REPO = Path(__file__).resolve().parents[2]
ADMIN_URL = os.environ.get(
    "ERASURE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
CLOSURE_SAMPLES = 60
TARGETS = {"plan_s": 10.0, "plan_mib": 1024.0, "p95_ms": 10.0}


def main() -> None:
    name = f"erasure_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    work = Path(tempfile.mkdtemp(prefix="erasure-bench-lineage-"))
    try:
        _run(url, work)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        subprocess.run(["rm", "-rf", str(work)], check=False)


def _run(url: str, work: Path) -> None:
    load = os.getloadavg()[0]
    t = time.perf_counter()
    facts = generate(work / "estate", url)
    print(
        f"estate: {facts.datasets:,} datasets, {facts.run_events:,} run events, "
        f"{facts.column_edges:,} column edges, catalog {facts.catalog.stat().st_size / 2**20:.1f} "
        f"MiB, events {facts.events.stat().st_size / 2**20:.0f} MiB, {len(facts.reachable):,} "
        f"reachable from the 3 roots (generated in {time.perf_counter() - t:.1f} s); "
        f"load average {load:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    env = {**os.environ, "ERASURE_STORE_URL": url, "ERASURE_CACHE_DIR": str(work / "cache")}
    from erasure.store import open_store

    open_store(url).close()  # migrated, as every command would

    # -- the estate's events, loaded as an operator loads them ---------------------------------
    cli_ingest(env, Stream(facts.events, facts.run_events, 0))

    # -- plan -----------------------------------------------------------------------------------
    cold_s, cold_mib, _ = _plan(env, facts.catalog, store=True)
    print(
        f"plan, first after the catalog changed (YAML parsed, then kept as JSON): {cold_s:.1f} s, "
        f"peak RSS {cold_mib:,.0f} MiB",
        flush=True,
    )
    seconds, mib, plan = _plan(env, facts.catalog, store=True)
    exact = _check_plan(plan, facts)
    verdict = (
        "PASS"
        if seconds <= TARGETS["plan_s"] and mib <= TARGETS["plan_mib"] and not exact
        else "FAIL"
    )
    print(
        f"plan (default flags, the next one): {seconds:.1f} s, peak RSS {mib:,.0f} MiB, "
        f"{len(plan['items']) - 1:,} artefacts, truncated={plan['truncated']}, "
        f"{'exact' if not exact else 'WRONG: ' + '; '.join(exact[:3])}; target <= "
        f"{TARGETS['plan_s']:.0f} s and <= {TARGETS['plan_mib']:.0f} MiB: {verdict}",
        flush=True,
    )
    seconds_old, mib_old, old = _plan(env, facts.catalog, store=False)
    print(
        f"  baseline, same plan without the store (every event file parsed per plan): "
        f"{seconds_old:.1f} s, peak RSS {mib_old:,.0f} MiB; without/with "
        f"{seconds_old / seconds:.1f}x time, {mib_old / mib:.1f}x memory; same items: "
        f"{[i['action'] for i in old['items']] == [i['action'] for i in plan['items']]}",
        flush=True,
    )

    # -- closure --------------------------------------------------------------------------------
    _closures(url, facts)


def _plan(
    env: dict[str, str], catalog: Path, *, store: bool
) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, peak RSS (MiB) and the plan document of one `erasure plan` process."""
    code = (
        "import sys, json\n"
        "from pydantic import SecretStr\n"
        "from erasure.catalog import load_catalog\n"
        "from erasure.model import SubjectRef\n"
        "from erasure.workflow import make_plan\n"
        f"catalog = load_catalog({str(catalog)!r})\n"
        f"subject = SubjectRef(type={SUBJECT[0]!r}, value=SecretStr(sys.stdin.read().strip()))\n"
        "plan = make_plan(catalog, subject)\n"
        "print(plan.model_dump_json())\n"
    )
    argv = (
        [sys.executable, "-m", "erasure.cli", "plan", "--catalog", str(catalog), "--subject",
         f"{SUBJECT[0]}=-", "--json"]
        if store
        else [sys.executable, "-c", code]
    )  # fmt: skip
    seconds, mib, cpu, out = measured(argv, env, SUBJECT[1] + "\n")
    print(f"  (plan process: {seconds:.1f} s wall, {cpu:.1f} s CPU)", flush=True)
    return seconds, mib, json.loads(out)


def _check_plan(plan: dict[str, Any], facts: EstateFacts) -> list[str]:
    """What is wrong with the plan; empty when every reachable artefact has its action."""
    problems = []
    if plan["truncated"]:
        problems.append("truncated")
    by_name = {i["dataset"]["name"]: i["action"] for i in plan["items"]}
    missing = facts.reachable - set(by_name)
    if missing:
        problems.append(f"{len(missing)} reachable artefacts missing")
    wrong = [n for n in facts.reachable if n in by_name and by_name[n] != facts.action[n]]
    if wrong:
        problems.append(f"{len(wrong)} with the wrong action, e.g. {wrong[0]}: {by_name[wrong[0]]}")
    roots = [n for n in ROOTS if by_name.get(n) != "erase_rows"]
    if roots:
        problems.append(f"roots not erased: {roots}")
    return problems


def _closures(url: str, facts: EstateFacts) -> None:
    from erasure.lineage import LineageStore
    from erasure.model import DatasetRef
    from erasure.store import open_store

    with open_store(url) as store:
        t = time.perf_counter()
        graph = LineageStore(store).graph()
        load_s = time.perf_counter() - t
    t = time.perf_counter()
    digraph = nx.DiGraph()
    cols = graph.columns
    current = cols.valid(None)
    digraph.add_edges_from(
        zip(
            [cols.datasets[i] for i in cols.src[current].tolist()],
            [cols.datasets[i] for i in cols.dst[current].tolist()],
            strict=True,
        )
    )
    nx_build = time.perf_counter() - t
    rng = random.Random(7)
    refs = sorted(graph.datasets())
    stg = [r for r in refs if r.name.startswith("stg.")]
    samples = [[DatasetRef(NAMESPACE, n)] for n in ROOTS] + [
        [DatasetRef(NAMESPACE, ROOTS[0]), DatasetRef(NAMESPACE, ROOTS[1])]
    ]
    samples += [[r] for r in rng.sample(stg, CLOSURE_SAMPLES // 2)]
    samples += [[r] for r in rng.sample(refs, CLOSURE_SAMPLES - len(samples))]
    ours, theirs, sizes = [], [], []
    for roots in samples:
        best_o = best_n = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            closure = graph.forward_closure(roots)
            best_o = min(best_o, time.perf_counter() - t)
            t = time.perf_counter()
            reached = set(roots)
            for root in roots:
                if root in digraph:
                    reached |= nx.descendants(digraph, root)
            best_n = min(best_n, time.perf_counter() - t)
        if set(closure.datasets) != reached:
            raise AssertionError(f"closure of {roots} differs from networkx")
        ours.append(best_o * 1e3)
        theirs.append(best_n * 1e3)
        sizes.append(len(closure.datasets))
    root_ms = ours[:3]
    p95 = _pct(ours, 95)
    verdict = "PASS" if p95 < TARGETS["p95_ms"] and max(root_ms) < TARGETS["p95_ms"] else "FAIL"
    print(
        f"closure from the store's index (loaded in {load_s:.2f} s; networkx DiGraph built in "
        f"{nx_build:.2f} s): {len(samples)} root sets, size p50 {_pct(sizes, 50):,.0f} / max "
        f"{max(sizes):,}, every one equal to networkx's\n"
        f"  ours p50 {_pct(ours, 50):.2f} ms p95 {p95:.2f} ms (from each root table: "
        f"{', '.join(f'{x:.1f}' for x in root_ms)} ms) | networkx p50 {_pct(theirs, 50):.2f} "
        f"ms p95 {_pct(theirs, 95):.2f} ms | networkx/ours p95 {_pct(theirs, 95) / p95:.1f}x; "
        f"target p95 < {TARGETS['p95_ms']:.0f} ms: {verdict}",
        flush=True,
    )


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]
