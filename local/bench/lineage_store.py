"""The lineage store at the size of a real estate, each number beside its baseline.

On a generated 30,000-dataset estate (`local.bench.estate`: ~30k run events, ~940k column edges,
three Postgres root tables, a ~4 MB catalog) in a throwaway Postgres database:

- ingest through `erasure lineage ingest` (whole process), for the estate's first load and
  for a day of repeated runs (START + COMPLETE of existing jobs, some FAIL, some changed
  lineage), against a bare COPY of the same raw-event rows into a copy of the table;
- ingest through the HTTP endpoint (the plugin's FastAPI app under uvicorn, JSON arrays of
  500 events, the lineage API key), the same day of runs again with new run ids;
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
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import networkx as nx
import psycopg

from local.bench.estate import NAMESPACE, ROOTS, SUBJECT, EstateFacts, generate

REPO = Path(__file__).resolve().parents[2]
ADMIN_URL = os.environ.get(
    "ERASURE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
LINEAGE_KEY = "ol-bench-" + uuid.uuid4().hex
DAY_RUNS = 15_000  # runs in the "day" stream: 30,000 events
HTTP_BATCH = 500
CLOSURE_SAMPLES = 60
TARGETS = {"cli": 5_000.0, "http": 2_000.0, "plan_s": 10.0, "plan_mib": 1024.0, "p95_ms": 10.0}


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

    # -- ingest: first load ---------------------------------------------------------------------
    base = _copy_baseline(url, facts.events)
    ours = _cli_ingest(env, facts.events)
    print(
        f"ingest, first load (every event new, {facts.column_edges / facts.run_events:.0f} "
        f"column edges each): ours {ours:,.0f} events/s | bare COPY of the same rows "
        f"{base:,.0f} rows/s | ours/COPY {ours / base:.2f}",
        flush=True,
    )

    # -- ingest: a day of repeated runs -----------------------------------------------------------
    day = work / "day.jsonl"
    count = _day_of_runs(facts, day, seed=1)
    base = _copy_baseline(url, day)
    ours = _cli_ingest(env, day)
    verdict = "PASS" if ours >= TARGETS["cli"] else "FAIL"
    print(
        f"ingest, a day of runs ({count:,} events: START+COMPLETE, 2% FAIL, 1% changed "
        f"lineage): ours {ours:,.0f} events/s | bare COPY {base:,.0f} rows/s | ours/COPY "
        f"{ours / base:.2f}; target >= {TARGETS['cli']:,.0f}/s: {verdict}",
        flush=True,
    )

    # -- ingest over HTTP -----------------------------------------------------------------------
    day2 = work / "day2.jsonl"
    _day_of_runs(facts, day2, seed=2)
    rate = _http_ingest(env, day2)
    verdict = "PASS" if rate >= TARGETS["http"] else "FAIL"
    print(
        f"ingest over HTTP (JSON arrays of {HTTP_BATCH}, 1 client, uvicorn): {rate:,.0f} "
        f"events/s; target >= {TARGETS['http']:,.0f}/s: {verdict}",
        flush=True,
    )

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


def _rows(path: Path) -> list[tuple[Any, ...]]:
    from datetime import UTC, datetime

    from erasure.lineage.openlineage import read_event_items
    from erasure.lineage.store import event_row

    now = datetime.now(UTC)
    rows = []
    for item in read_event_items(path):
        if isinstance(item.parsed, Exception):
            continue
        row = event_row(item.parsed, now)
        rows.append(tuple(row.values()))
    return rows


def _copy_baseline(url: str, path: Path) -> float:
    """Rows/s of a bare COPY of the same `lineage_events` rows into an empty copy of it."""
    rows = _rows(path)
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_copy (LIKE lineage_events INCLUDING ALL)")
        conn.execute("TRUNCATE bench_copy")
        conn.commit()
        t = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY bench_copy (event_id, job, run_id, event_type, event_time, raw, received_at) "
                "FROM STDIN"
            ) as copy,
        ):
            for row in rows:
                copy.write_row(row)
        conn.commit()
        seconds = time.perf_counter() - t
    return len(rows) / seconds


def _cli_ingest(env: dict[str, str], path: Path) -> float:
    argv = [sys.executable, "-m", "erasure.cli", "lineage", "ingest", "--json", str(path)]
    seconds, _, cpu, out = _measured(argv, env, "")
    doc = json.loads(out)
    print(
        f"  (ingest process: {seconds:.1f} s wall, {cpu:.1f} s CPU for {doc['events']:,} events; "
        f"{doc['events'] / cpu:,.0f} events per CPU second)",
        flush=True,
    )
    return float(doc["events"]) / seconds


def _measured(argv: list[str], env: dict[str, str], stdin: str) -> tuple[float, float, float, str]:
    """Wall seconds, peak RSS (MiB), CPU seconds (user + system) and stdout of one process."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        child = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert child.stdin is not None
        child.stdin.write(stdin.encode())
        child.stdin.close()
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS and CPU
        seconds = time.perf_counter() - t
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise AssertionError(f"{argv[1:4]} failed: {err.read()[-2000:]}")
        return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, out.read()


def _day_of_runs(facts: EstateFacts, path: Path, *, seed: int) -> int:
    """Repeated runs of the estate's jobs: same lineage, new run ids, a day later."""
    rng = random.Random(seed)
    with facts.events.open() as source:
        templates = [json.loads(line) for _, line in zip(range(DAY_RUNS), source, strict=False)]
    count = 0
    day = date(2026, 11, 29) + timedelta(days=seed - 1)  # a later seed, a later day
    with path.open("w") as out:
        for k, template in enumerate(templates):
            run_id = str(uuid.UUID(int=rng.getrandbits(128)))
            hour = f"{day.isoformat()}T{k % 24:02d}:{k % 60:02d}:00"
            start = {**template, "eventType": "START", "eventTime": hour + "Z"}
            start["run"] = {"runId": run_id}
            start["outputs"] = [
                {"namespace": o["namespace"], "name": o["name"]} for o in template["outputs"]
            ]
            end = json.loads(json.dumps(template))
            end["run"] = {"runId": run_id}
            end["eventTime"] = hour[:-2] + "30Z"
            roll = rng.random()
            if roll < 0.02:
                end["eventType"] = "FAIL"
            elif roll < 0.03:
                fields = end["outputs"][0]["facets"]["columnLineage"]["fields"]
                fields.pop(next(iter(fields)))  # a deploy dropped a column
            out.write(json.dumps(start, separators=(",", ":")) + "\n")
            out.write(json.dumps(end, separators=(",", ":")) + "\n")
            count += 2
    return count


def _http_ingest(env: dict[str, str], path: Path) -> float:
    port = _free_port()
    server_env = {
        **env,
        "ERASURE_LINEAGE_API_KEY": LINEAGE_KEY,
        "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "erasure_api:create_app", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=server_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_up(base, server)
        lines = path.read_text().splitlines()
        batches = [
            "[" + ",".join(lines[i : i + HTTP_BATCH]) + "]"
            for i in range(0, len(lines), HTTP_BATCH)
        ]
        headers = {"Authorization": f"Bearer {LINEAGE_KEY}", "Content-Type": "application/json"}
        with httpx.Client(base_url=base, timeout=120) as client:
            t = time.perf_counter()
            stored = 0
            for body in batches:
                response = client.post("/api/v1/lineage", content=body, headers=headers)
                if response.status_code not in (200, 201):
                    raise AssertionError(
                        f"HTTP ingest: {response.status_code} {response.text[:500]}"
                    )
                stored += int(response.json()["stored"])
            seconds = time.perf_counter() - t
        if stored != len(lines):
            raise AssertionError(f"HTTP ingest stored {stored} of {len(lines)} events")
        return len(lines) / seconds
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_up(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(
                f"uvicorn exited: {server.stderr.read().decode()[-2000:] if server.stderr else ''}"
            )
        try:
            httpx.get(base + "/api/v1/lineage", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise AssertionError("uvicorn did not come up in 120 s")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    seconds, mib, cpu, out = _measured(argv, env, SUBJECT[1] + "\n")
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
    from erasure.lineage.store import LineageStore
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
