"""Event files judged in worker processes store exactly what one process stores."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from erasure.errors import LineageError
from erasure.lineage.openlineage import OutputLineage, event_json
from erasure.lineage.store import LineageStore
from erasure.lineage.store import workers as ingest_workers
from erasure.lineage.store.workers import judged_batches
from erasure.model import DatasetRef
from erasure.store import Store, open_store
from erasure.store.schema import LINEAGE_RUN_ID_LENGTH
from tests.unit.lineage.test_store import _with_airflow_facets, event

_COMPARED = {  # every column but the wall-clock ones (received_at, updated_at, ...)
    "lineage_events": "event_id, job, run_id, event_type, event_time, raw",
    "lineage_runs": "job, run_id, state, event_time, completed_at, events, inputs, outputs",
    "lineage_outputs": "producer, dataset_id, edge_set, facet_digest, current_since, "
    "last_run_id, last_completed_at, gap",
    "lineage_edge_sets": "id, target_dataset_id, producer, origin, run_id, run_state, "
    "valid_from, valid_to, observed_at, edges, links, version",
    "lineage_datasets": "id, namespace, name",
    "lineage_quarantine": "origin, reason, body",
}


def _day(path: Path) -> Path:
    """Runs of two jobs over three batches of four: changed lineage, a failure, a run whose
    events straddle batches, facets that are not kept, a float, and malformed lines."""
    lines = []
    for k in range(6):
        at = f"2026-11-0{k + 1}T02:00:00Z"
        columns = {"ltv": ["amount"]} if k < 3 else {"ltv": ["amount", "fee"], "n": ["id"]}
        lines.append(json.dumps(event(f"r{k}", "START", at, columns)))
        lines.append(json.dumps(event(f"r{k}", "FAIL" if k == 4 else "COMPLETE", at, columns)))
    other = event("o1", job="build_marts.orders", output="marts.orders")
    other["outputs"][0]["facets"]["dataQuality"] = {"rowCount": 3, "ratio": 0.5}  # a float
    lines += [json.dumps(_with_airflow_facets(other)), "{not json", ""]
    broken = event("b1")
    del broken["eventTime"]
    lines += [json.dumps(broken), json.dumps(event("x" * (LINEAGE_RUN_ID_LENGTH + 1)))]  # too long
    lines.insert(1, json.dumps(event("late", "START", "2026-11-01T01:00:00Z")))
    lines.append(json.dumps(event("late", "COMPLETE", "2026-11-01T01:30:00Z")))
    path.write_text("\n".join(lines) + "\n")
    return path


def _tables(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    with store.engine.connect() as conn:
        return {
            table: sorted(tuple(str(v) for v in row) for row in conn.exec_driver_sql(
                f"SELECT {columns} FROM {table}"
            ))
            for table, columns in _COMPARED.items()
        }  # fmt: skip


def test_workers_store_the_same_rows_ids_and_quarantine_as_one_process(tmp_path: Path) -> None:
    path = _day(tmp_path / "day.jsonl")
    with (
        open_store(f"sqlite:///{tmp_path}/one.db") as one,
        open_store(f"sqlite:///{tmp_path}/workers.db") as workers,
    ):
        alone = LineageStore(one, batch_size=4).ingest_file(path)
        forked = LineageStore(workers, batch_size=4).ingest_file(path, workers=2)
        assert forked.model_dump(exclude={"touched"}) == alone.model_dump(exclude={"touched"})
        assert forked.touched == alone.touched
        assert (forked.stored, forked.quarantined) == (15, 3)
        assert _tables(workers) == _tables(one)

        again = LineageStore(workers, batch_size=4).ingest_file(path, workers=2)
        assert (again.stored, again.duplicates, again.quarantined) == (0, 15, 3)


@pytest.mark.parametrize("batch_size", [1, 3, 7, 64])
def test_batches_judged_in_parts_are_the_batches_one_process_reads(
    tmp_path: Path, batch_size: int
) -> None:
    """Each batch goes to the workers in parts (of uneven length when it does not divide):
    the writer gets the same batches, in file order, and stores the same rows."""
    path = _day(tmp_path / "day.jsonl")
    with (
        open_store(f"sqlite:///{tmp_path}/one.db") as one,
        open_store(f"sqlite:///{tmp_path}/workers.db") as workers,
    ):
        alone = LineageStore(one, batch_size=batch_size).ingest_file(path)
        forked = LineageStore(workers, batch_size=batch_size).ingest_file(path, workers=2)
        assert forked.model_dump() == alone.model_dump()
        assert _tables(workers) == _tables(one)
    batches = judged_batches(path, batch_size, 2)
    if batch_size < 18:  # more than one batch: judged in the workers
        assert batches is not None
        sizes = [len(b) for b in batches]
        assert sizes[:-1] == [batch_size] * (len(sizes) - 1) and sum(sizes) == 18


def test_a_file_of_one_batch_or_not_json_lines_is_read_in_this_process(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(json.dumps(event(f"r{k}")) for k in range(4)) + "\n")
    array = tmp_path / "array.json"
    array.write_text(json.dumps([event(f"r{k}") for k in range(9)]))
    assert judged_batches(small, 4, 2) is None
    assert judged_batches(array, 4, 2) is None
    assert judged_batches(_day(tmp_path / "day.jsonl"), 4, 0) is None
    batches = judged_batches(_day(tmp_path / "day.jsonl"), 4, 2)
    assert batches is not None and [len(b) for b in batches] == [4, 4, 4, 4, 2]


@pytest.mark.postgres
def test_workers_write_postgres_as_one_process_does(tmp_path: Path, postgres_url: str) -> None:
    path = _day(tmp_path / "day.jsonl")
    with open_store(postgres_url) as store, open_store(f"sqlite:///{tmp_path}/one.db") as one:
        for table in ("lineage_index", "lineage_edge_sets", "lineage_outputs", "lineage_runs",
                      "lineage_sources", "lineage_quarantine", "lineage_datasets"):  # fmt: skip
            with store.engine.begin() as conn:
                conn.exec_driver_sql(f"DELETE FROM {table}")
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE lineage_events DISABLE TRIGGER USER")
            conn.exec_driver_sql("DELETE FROM lineage_events")
            conn.exec_driver_sql("ALTER TABLE lineage_events ENABLE TRIGGER USER")
        # The projection version is the session database's: compare what the ingest adds
        # to each, both past their first backfill.
        for each in (store, one):
            LineageStore(each).reproject(unless_backfilled=True)
        versions = [LineageStore(s).counts()["version"] for s in (store, one)]
        forked = LineageStore(store, batch_size=4).ingest_file(path, workers=2)
        alone = LineageStore(one, batch_size=4).ingest_file(path)
        assert forked.results == alone.results
        counts = [LineageStore(s).counts() for s in (store, one)]
        for count, version in zip(counts, versions, strict=True):
            count["version"] -= version
        assert counts[0] == counts[1]


def _ends_abruptly(path: str, lines: list[tuple[int, str]]) -> list[Any]:
    os._exit(1)  # as the kernel's OOM killer would end it


def test_a_worker_that_dies_stops_the_ingest_with_what_to_do_and_a_retry_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _day(tmp_path / "day.jsonl")
    with open_store(f"sqlite:///{tmp_path}/erasure.db") as store:
        # The workers are forked: they run this module as patched here.
        monkeypatch.setattr(ingest_workers, "judge_lines", _ends_abruptly)
        with pytest.raises(LineageError, match=r"ended abruptly.*run the ingest again"):
            LineageStore(store, batch_size=4).ingest_file(path, workers=2)
        monkeypatch.undo()
        done = LineageStore(store, batch_size=4).ingest_file(path, workers=2)
        assert (done.stored, done.quarantined) == (15, 3)


def test_facets_handed_over_as_text_digest_by_their_values_in_a_mixed_run() -> None:
    # A run merged from a worker's events (link facets as msgspec.Raw) and one the standard
    # library read (a float somewhere) digests with the standard library: by the values.
    def facets(columns: list[str]) -> dict[str, Any]:
        fields = {
            c: {"inputFields": [{"namespace": "w", "name": "t", "field": c}]} for c in columns
        }
        return {
            "columnLineage": {"fields": fields},
            "schema": {"fields": [{"name": c} for c in columns]},
        }

    def digest(given: dict[str, Any]) -> str:
        return OutputLineage(DatasetRef("w", "x"), given, (), "job", native=False).facet_digest()

    def handed_over(given: dict[str, Any]) -> dict[str, Any]:
        return {name: event_json.raw(value) for name, value in given.items()}

    assert digest(handed_over(facets(["a"]))) == digest(facets(["a"]))
    assert digest(handed_over(facets(["a"]))) != digest(handed_over(facets(["a", "b"])))
