"""Lineage ingest at peak, each number beside its baseline from the same run.

On the generated 30,000-dataset estate (`local.bench.estate`: ~30k COMPLETE run events with
~940k column edges) in a throwaway Postgres database, and again on a SQLite store (the
embedded default):

- `erasure lineage ingest FILE` (the whole process, as an operator runs it): the estate's
  first load (every event new); a day of repeated runs (START + COMPLETE of existing jobs,
  2% FAIL, 1% changed lineage, and a few malformed events that must be quarantined and
  counted); the next day in one process (`--workers 0`), against the default that forks a
  worker per core; the same day's file again, which must store nothing and cost a fraction
  of the first time; a late day (more runs of the first day, arriving after later days).
  Baseline: a bare COPY (Postgres) or executemany (SQLite) of the same raw-event
  rows into an empty copy of `lineage_events`, indexes included.
- `POST /erasure/api/v1/lineage`: the plugin's FastAPI app under uvicorn, one client sending
  JSON arrays of 500 with the lineage API key, another day of runs (new run ids).

Targets (Postgres), for every shape above: >= 10,000 events/s, and >= 25% of the bare COPY
of the same rows (ours/baseline >= 0.25). Each line says PASS or FAIL against both.
Wall times follow the machine's other load (printed); CPU seconds and ratios much less so.

Development knobs: ERASURE_BENCH_INGEST_SCALE (e.g. 0.1: a tenth of the estate and of each
day) and ERASURE_BENCH_INGEST_STORES (postgres, sqlite, or both, comma-separated).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

from local.bench.estate import EstateFacts, generate

REPO = Path(__file__).resolve().parents[2]
ADMIN_URL = os.environ.get(
    "ERASURE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
LINEAGE_KEY = "ol-bench-" + uuid.uuid4().hex
# Development knobs: a smaller estate (and days), and which stores to measure.
SCALE = float(os.environ.get("ERASURE_BENCH_INGEST_SCALE", "1"))
STORES = os.environ.get("ERASURE_BENCH_INGEST_STORES", "postgres,sqlite").split(",")
DAY_RUNS = max(1, round(15_000 * SCALE))  # runs in a "day" stream: 30,000 events
DAY_ONE = date(2026, 11, 29)  # the day after the estate's events
MALFORMED_EVERY = max(10, round(3_000 * SCALE))  # one malformed event per this many runs, two kinds
HTTP_BATCH = 500
TARGET_RATE = 10_000.0  # events/s, every shape (Postgres)
TARGET_RATIO = 0.25  # of a bare COPY of the same rows
_EVENT_COLUMNS = "event_id, job, run_id, event_type, event_time, raw, received_at"


@dataclass(frozen=True)
class Stream:
    path: Path
    events: int  # lines, malformed ones included
    malformed: int


def main() -> None:
    name = f"erasure_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    work = Path(tempfile.mkdtemp(prefix="erasure-bench-ingest-"))
    try:
        facts = generate(work / "estate", url, scale=SCALE)
        print(
            f"estate: {facts.datasets:,} datasets, {facts.run_events:,} run events, "
            f"{facts.column_edges:,} column edges (events "
            f"{facts.events.stat().st_size / 2**20:.0f} MiB); {os.cpu_count()} cores",
            flush=True,
        )
        # The CLI's day has lines that are not JSON; over HTTP such a line would spoil its
        # whole array (a 400), so the HTTP day's malformed events are JSON, not events.
        days = Days(
            day_of_runs(facts, work / "day1.jsonl", DAY_ONE, seed=1, not_json=True),
            day_of_runs(facts, work / "day2.jsonl", DAY_ONE + timedelta(1), seed=2, not_json=True),
            day_of_runs(facts, work / "day3.jsonl", DAY_ONE + timedelta(2), seed=3, not_json=False),
            # Runs of the first day that had not arrived: dated before the newest stored.
            day_of_runs(facts, work / "late.jsonl", DAY_ONE, seed=4, not_json=True),
        )
        if "postgres" in STORES:
            run_all(url, work, facts, days, "Postgres")
        if "sqlite" in STORES:
            run_all(f"sqlite:///{work / 'store.db'}", work, facts, days, "SQLite")
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        subprocess.run(["rm", "-rf", str(work)], check=False)


@dataclass(frozen=True)
class Days:
    """The streams of days of runs, in the order they are ingested."""

    cli: Stream  # with workers (the default)
    one_process: Stream  # the next day, --workers 0
    http: Stream  # the day after, over HTTP
    late: Stream  # more runs of the first day, after the others


def run_all(url: str, work: Path, facts: EstateFacts, days: Days, backend: str) -> None:
    """Every measurement on one store: CLI first load, a day (with workers, in one process,
    again), HTTP, a late day."""
    env = {**os.environ, "ERASURE_STORE_URL": url, "ERASURE_CACHE_DIR": str(work / "cache")}
    from erasure.store import open_store

    open_store(url).close()  # migrated, as every command would
    first = Stream(facts.events, facts.run_events, 0)
    print(f"-- {backend} (load average {os.getloadavg()[0]:.1f})", flush=True)

    base = baseline(url, first.path)
    ours, _, _ = cli_ingest(env, first)
    edges = facts.column_edges / facts.run_events
    shape(f"CLI, first load (every event new, {edges:.0f} column edges each)", ours, base, backend)

    day = days.cli
    base = baseline(url, day.path)
    ours, seconds, doc = cli_ingest(env, day)
    counted = doc["quarantined"] == day.malformed
    shape(
        f"CLI, a day of runs ({day.events:,} events: START+COMPLETE, 2% FAIL, 1% changed "
        f"lineage, {day.malformed} malformed)",
        ours,
        base,
        backend,
        f"quarantined {doc['quarantined']} of {day.malformed} malformed",
        counted,
    )

    alone, alone_seconds, _ = cli_ingest(env, days.one_process, "--workers", "0")
    shape(
        "CLI, the next day in one process (--workers 0; the default forks a worker per core)",
        alone,
        baseline(url, days.one_process.path),
        backend,
        f"{alone_seconds:.1f} s against {seconds:.1f} s with workers "
        f"({alone_seconds / seconds:.1f}x)",
    )

    again, again_seconds, doc = cli_ingest(env, day)
    nothing_new = doc["stored"] == 0 and doc["duplicates"] == day.events - day.malformed
    shape(
        "CLI, the same day again (idempotent)",
        again,
        base,
        backend,
        f"{again_seconds:.1f} s against {seconds:.1f} s the first time "
        f"({seconds / again_seconds:.1f}x cheaper); stored {doc['stored']}, duplicates "
        f"{doc['duplicates']:,}",
        nothing_new,
    )

    http = days.http
    rate = http_ingest(env, http)
    shape(
        f"HTTP (JSON arrays of {HTTP_BATCH}, 1 client, uvicorn, the plugin's app)",
        rate,
        baseline(url, http.path),
        backend,
    )

    late, late_seconds, doc = cli_ingest(env, days.late)
    shape(
        "CLI, a late day (more runs of the first day, after two later days: each placed in "
        "its time)",
        late,
        baseline(url, days.late.path),
        backend,
        f"{late_seconds:.1f} s against {seconds:.1f} s for the first day; {doc['edges']:,} "
        f"edges opened, {doc['edges_closed']:,} superseded",
    )


def shape(
    label: str, ours: float, base: float, backend: str, note: str = "", correct: bool = True
) -> None:
    """One measured shape: ours beside the baseline, and (Postgres) the targets' verdict."""
    ratio = ours / base
    line = f"{label}: ours {ours:,.0f} events/s | {_BASE[backend]} {base:,.0f} rows/s | "
    line += f"ours/baseline {ratio:.2f}"
    if note:
        line += f"; {note}"
    if backend == "Postgres":
        met = ours >= TARGET_RATE and ratio >= TARGET_RATIO and correct
        line += (
            f"; target >= {TARGET_RATE:,.0f}/s and >= {TARGET_RATIO:.2f}: "
            f"{'PASS' if met else 'FAIL'}"
        )
    elif not correct:
        line += ": FAIL"
    print(line, flush=True)


_BASE = {"Postgres": "bare COPY of the same rows", "SQLite": "bare executemany of the same rows"}


# -- streams ----------------------------------------------------------------------------------


def day_of_runs(facts: EstateFacts, path: Path, day: date, *, seed: int, not_json: bool) -> Stream:
    """Repeated runs of the estate's jobs on `day`: same lineage, new run ids (by `seed`); a
    few malformed events among them (no eventTime; and, if `not_json`, lines that are not
    JSON)."""
    rng = random.Random(seed)
    with facts.events.open() as source:
        templates = [json.loads(line) for _, line in zip(range(DAY_RUNS), source, strict=False)]
    count = malformed = 0
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
            if k % MALFORMED_EVERY == MALFORMED_EVERY - 1:
                broken = {key: value for key, value in start.items() if key != "eventTime"}
                text = "{not json" if not_json and malformed % 2 else json.dumps(broken)
                out.write(text + "\n")
                count += 1
                malformed += 1
    return Stream(path, count, malformed)


# -- baselines --------------------------------------------------------------------------------


def _rows(path: Path) -> list[tuple[Any, ...]]:
    from datetime import UTC, datetime

    from erasure.lineage import event_row, read_event_items

    now = datetime.now(UTC)
    rows = []
    for item in read_event_items(path):
        if isinstance(item.parsed, Exception):
            continue
        row = event_row(item.parsed, now, item.text)
        rows.append(tuple(row[c] for c in _EVENT_COLUMNS.split(", ")))
    return rows


def baseline(url: str, path: Path) -> float:
    """Rows/s of a bare bulk insert of the same `lineage_events` rows into an empty copy."""
    rows = _rows(path)
    if url.startswith("sqlite"):
        return _sqlite_baseline(url.removeprefix("sqlite:///"), rows)
    with psycopg.connect(url) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute("CREATE TABLE bench_copy (LIKE lineage_events INCLUDING ALL)")
        conn.commit()
        t = time.perf_counter()
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY bench_copy ({_EVENT_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types(["text", "text", "text", "text", "timestamptz", "text", "timestamptz"])
            for row in rows:
                copy.write_row(row)
        conn.commit()
        seconds = time.perf_counter() - t
        conn.execute("DROP TABLE bench_copy")
    return len(rows) / seconds


def _sqlite_baseline(database: str, rows: list[tuple[Any, ...]]) -> float:
    conn = sqlite3.connect(database)
    try:
        ddl = [
            str(sql).replace("lineage_events", "bench_copy")
            for (sql,) in conn.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'lineage_events' "
                "AND sql IS NOT NULL AND type IN ('table', 'index')"
            )
        ]
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        for statement in ddl:
            conn.execute(statement)
        texts = [(*r[:4], r[4].isoformat(), r[5], r[6].isoformat()) for r in rows]
        t = time.perf_counter()
        with conn:
            conn.executemany(
                f"INSERT INTO bench_copy ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", texts
            )
        seconds = time.perf_counter() - t
        conn.execute("DROP TABLE bench_copy")
    finally:
        conn.close()
    return len(rows) / seconds


# -- ours -------------------------------------------------------------------------------------


def cli_ingest(
    env: dict[str, str], stream: Stream, *options: str
) -> tuple[float, float, dict[str, Any]]:
    """Events/s, wall seconds and the --json document of one `erasure lineage ingest`."""
    argv = [sys.executable, "-m", "erasure.cli", "lineage", "ingest", "--json", *options]
    argv.append(str(stream.path))
    seconds, mib, cpu, out = measured(argv, env, "")
    doc = json.loads(out)
    print(
        f"  (ingest process: {seconds:.1f} s wall, {cpu:.1f} s CPU for {doc['events']:,} events; "
        f"{doc['events'] / cpu:,.0f} events per CPU second; peak RSS {mib:,.0f} MiB)",
        flush=True,
    )
    return float(doc["events"]) / seconds, seconds, doc


# Runs a command and writes its peak RSS (KiB) and CPU seconds, its own processes' only, to
# the file named first. A process's peak RSS counts the memory of the process it was spawned
# from until it ran the command (Linux carries it over exec): measured here, this small
# process is that parent, not the benchmark holding the estate.
_LAUNCHER = (
    "import json, resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:])\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "with open(sys.argv[1], 'w') as out:\n"
    "    json.dump([usage.ru_maxrss, usage.ru_utime + usage.ru_stime], out)\n"
    "sys.exit(code)\n"
)


def measured(argv: list[str], env: dict[str, str], stdin: str) -> tuple[float, float, float, str]:
    """Wall seconds, peak RSS (MiB, of its largest process), CPU seconds (user + system, its
    worker processes included) and stdout of one command."""
    with (
        tempfile.TemporaryFile("w+") as out,
        tempfile.TemporaryFile("w+") as err,
        tempfile.NamedTemporaryFile("r") as usage,
    ):
        launched = [sys.executable, "-c", _LAUNCHER, usage.name, *argv]
        t = time.perf_counter()
        child = subprocess.Popen(launched, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert child.stdin is not None
        child.stdin.write(stdin.encode())
        child.stdin.close()
        child.wait()
        seconds = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise AssertionError(f"{argv[1:4]} failed: {err.read()[-2000:]}")
        kib, cpu = json.load(usage)
        return seconds, kib / 1024, cpu, out.read()


def http_ingest(env: dict[str, str], stream: Stream) -> float:
    """Events/s through the plugin's endpoint under uvicorn; checks what it stored."""
    port = _free_port()
    server_env = {
        **env,
        "ERASURE_LINEAGE_API_KEY": LINEAGE_KEY,
        "PYTHONPATH": str(REPO),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "erasure_airflow.api:create_app", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=server_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_up(base, server)
        lines = stream.path.read_text().splitlines()
        batches = [
            "[" + ",".join(lines[i : i + HTTP_BATCH]) + "]"
            for i in range(0, len(lines), HTTP_BATCH)
        ]
        headers = {"Authorization": f"Bearer {LINEAGE_KEY}", "Content-Type": "application/json"}
        stored = quarantined = 0
        cpu = _cpu_seconds(server.pid)
        with httpx.Client(base_url=base, timeout=120) as client:
            t = time.perf_counter()
            for body in batches:
                response = client.post("/api/v1/lineage", content=body, headers=headers)
                if response.status_code not in (200, 201):
                    raise AssertionError(
                        f"HTTP ingest: {response.status_code} {response.text[:500]}"
                    )
                answer = response.json()
                stored += int(answer["stored"])
                quarantined += int(answer["quarantined"])
            seconds = time.perf_counter() - t
        cpu = _cpu_seconds(server.pid) - cpu
        print(
            f"  (server: {seconds:.1f} s wall, {cpu:.1f} s CPU for {len(lines):,} events; "
            f"{len(lines) / cpu:,.0f} events per CPU second)",
            flush=True,
        )
        if (stored, quarantined) != (len(lines) - stream.malformed, stream.malformed):
            raise AssertionError(
                f"HTTP ingest stored {stored} and quarantined {quarantined} of {len(lines)} "
                f"events ({stream.malformed} malformed)"
            )
        return len(lines) / seconds
    finally:
        server.terminate()
        server.wait(timeout=30)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_up(base: str, server: subprocess.Popen[bytes]) -> None:
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
