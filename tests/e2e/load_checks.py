"""What a load of requests at once must show, on any executor's stack (tests/e2e/test_load.py
on the session's LocalExecutor stack, tests/e2e/test_celery.py on a CeleryExecutor stack).

The bar (issue 9): all complete with no intervention; each effect happens once; no prompt's
task resumes later than 30 s after its answer; the chain verifies; the rematerialisation runs
are shared (coalesced), and each request's evidence cites the run that served it.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from local.bench.load import Load, LoadResult

RESUME_WITHIN_SECONDS = 30.0


def runs_so_far(load: Load) -> set[str]:
    """The rematerialisation runs triggered before a load."""
    return {run["dag_run_id"] for found in load.rematerialisation_runs().values() for run in found}


def all_complete_with_no_intervention(result: LoadResult) -> None:
    assert Counter(result.states.values()) == {"success": len(result.runs)}, result.states
    assert set(result.completed_at) == set(result.runs)


def one_record_of_each_kind_and_the_chain_verifies(result: LoadResult, load: Load) -> None:
    for ref in result.runs:
        kinds = Counter(r["kind"] for r in load.auditor(f"/erasure/api/v1/records/{ref}"))
        assert kinds["received"] == 1 and kinds["completed"] == 1, (ref, kinds)
        assert kinds["failed"] == 0, (ref, kinds)
    report = load.auditor("/erasure/api/v1/records/verify")
    assert report["ok"] is True, report


def each_effect_happened_once(result: LoadResult, load: Load) -> None:
    """Every action of every request is done, and each subject's row went once: the customer
    row of the subject submitted twice was deleted by one of its two requests (the other
    found it gone, or planned after and found nothing); every key was destroyed."""
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for ref in result.runs:
        detail = load.auditor(f"/erasure/api/v1/requests/{ref}")
        assert all(a["status"] == "done" for a in detail["actions"]), (ref, detail["actions"])
        (completed,) = [
            r for r in load.auditor(f"/erasure/api/v1/records/{ref}") if r["kind"] == "completed"
        ]
        by_subject.setdefault(detail["subject_hash"], []).append(completed["body"])
    assert sorted(len(bodies) for bodies in by_subject.values()) == [1] * (len(result.runs) - 2) + [
        2
    ]
    for bodies in by_subject.values():
        # A request planned after the other had erased the subject finds less (or nothing)
        # to act on: what each did, summed, is once.
        evidence = [_evidence(body) for body in bodies]
        deleted = [
            e.get(("erase_rows", "crm.customers"), {}).get("rows_deleted", 0) for e in evidence
        ]
        assert sum(deleted) == 1, deleted
        shredded = [
            e.get(("crypto_shred", "archive.customer_events"), {}).get("keys_shredded", 0)
            for e in evidence
        ]
        # Both requests of one subject may find its key present and destroy it (Vault's
        # destroy is idempotent, and each proves it gone); one subject's one request, once.
        assert sum(shredded) == 1 if len(bodies) == 1 else sum(shredded) >= 1, shredded


def _evidence(body: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """A completed record's evidence by (action, dataset)."""
    return {(a["action"], a["dataset"]): a["evidence"] for a in body["artefacts"]}


def no_prompt_resumes_later_than_30_s_after_its_answer(result: LoadResult) -> None:
    assert result.prompts, "no prompt was answered"
    unresumed = [p for p in result.prompts if p.resumed_at is None]
    assert not unresumed, unresumed
    late = [d for d in result.resume_delays() if d > RESUME_WITHIN_SECONDS]
    assert not late, f"{len(late)} prompts resumed late: {sorted(late)[-5:]}"


def rebuilds_share_runs_and_each_cites_the_one_that_served_it(
    result: LoadResult, load: Load, runs_before: set[str]
) -> None:
    """Every DAG rebuild cites a run that started after its own request's erasures were done,
    and the load needed fewer runs than rebuilds."""
    runs = {
        run["dag_run_id"]: run
        for found in load.rematerialisation_runs().values()
        for run in found
        if run["dag_run_id"] not in runs_before
    }
    served: Counter[str] = Counter()
    for ref in result.runs:
        for record in load.auditor(f"/erasure/api/v1/records/{ref}"):
            if record["kind"] != "completed":
                continue
            for artefact in record["body"]["artefacts"]:
                evidence = artefact["evidence"]
                if artefact["action"] != "rebuild" or evidence.get("method") != "dag":
                    continue
                served[evidence["run_id"]] += 1
                started = datetime.fromisoformat(evidence["run_started_at"])
                assert started >= datetime.fromisoformat(evidence["upstreams_done_at"]), evidence
                assert runs[evidence["run_id"]]["state"] == "success", evidence
    assert served, "no rebuild by DAG in the load"
    assert set(served) <= set(runs), set(served) - set(runs)
    assert max(served.values()) > 1, served  # one run served several requests
    assert len(runs) < sum(served.values()), (len(runs), served)
