"""What `make demo` prints after the run: the plan, each action's evidence, the verification
and the signed completion record, read back from the erasure store like an auditor would."""

from __future__ import annotations

from typing import Any

from erasure.audit.records import RecordKind
from erasure.config import Settings
from erasure.report import render_plan
from erasure.services import Services


def print_summary(settings: Settings, ref: str, run: Any, sync: dict[str, Any]) -> int:
    state = str(getattr(run, "state", "unknown"))
    with Services.open(settings) as svc:
        request = svc.requests.get(ref)
        if request is None:
            print(f"The run ended {state} before registering {ref}.")
            return 1
        print(render_plan(svc.plans.get(ref, 1)))
        print("\nWhat was done")
        for action in svc.action_log.list(ref):
            print(
                f"  {action.status.value:<7} {action.action:<16} {action.dataset.qualified}  "
                f"{_evidence(action.action, action.evidence)}"
            )
        records = svc.ledger.show(ref)
        completed = [r for r in records if r.kind is RecordKind.COMPLETED]
        if completed:
            record = completed[0]
            checks = record.body["verification"]["checks"]
            passed = sum(1 for c in checks if c["passed"])
            print(f"\nVerification: {passed}/{len(checks)} checks passed")
            for check in checks:
                if check["check"] in (
                    "recount",
                    "key destroyed",
                    "tombstone",
                    "sealed submission destroyed",
                ):
                    print(
                        f"  {'ok ' if check['passed'] else 'BAD'} {check['check']:<27} "
                        f"{check['target']}: {check['result']}"
                    )
            status = record.status.value if record.status else "-"
            print(f"\nCompletion record #{record.seq}: {status}")
            print(f"  request {ref}, subject {record.subject_hash[:16]}…")
            print(f"  effective erasure date {record.body['effective_erasure_date']}")
            print(f"  record hash {record.record_hash}")
            print(f"  signature   {record.signature[:40]}… (key v{record.signing_key_version})")
        print(
            f"\nNext CRM sync (crm_ingest, {sync.get('state')}): read {sync.get('read')}, "
            f"loaded {sync.get('loaded')}, suppressed {sync.get('suppressed')} "
            "(the erased subject, whatever the letter case in the export)"
        )
        report = svc.ledger.verify()
        print(f"\nChain: {'OK' if report.ok else 'BROKEN'}, {report.records} record(s)")
        print(f"Request status: {svc.requests.require(ref).status.value}; DAG run: {state}")
        return 0 if completed and report.ok else 1


def _evidence(action: str, evidence: dict[str, Any]) -> str:
    if action == "erase_rows":
        done = f"{evidence.get('rows_deleted')} row(s) deleted, {evidence.get('rows_after')} left"
        history = evidence.get("history")
        if history:
            files = sum(history.get("files_removed", {}).values())
            done += (
                f"; {history.get('snapshots_expired')} {history.get('format')} snapshot(s) "
                f"expired, {files} file(s) removed, {history.get('snapshots_after')} kept"
            )
        return done
    if action == "rebuild":
        run = f" run {evidence['run_id']}" if evidence.get("run_id") else ""
        return f"{evidence.get('method')}{run}, {evidence.get('rows_after')} row(s)"
    if action == "crypto_shred":
        return (
            f"{evidence.get('keys_shredded')} key(s) destroyed, snapshots expire "
            f"{evidence.get('snapshot_expiry_date')}"
        )
    if action == "aggregate_ok":
        at_act = evidence.get("at_act", {})
        return f"k={at_act.get('k')} min group {at_act.get('min_group_size')}"
    if action == "escalate":
        ruling = evidence.get("ruling", {})
        return f"{ruling.get('option')} by {ruling.get('author_name')}"
    if action == "insert_tombstone":
        return f"{len(evidence.get('tombstones', []))} tombstone(s)"
    if action == "verify":
        return "passed" if evidence.get("passed") else "failed"
    return ""
