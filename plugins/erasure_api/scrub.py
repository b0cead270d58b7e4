"""Scrub a request's raw identifier from Airflow's metadata DB.

The DPO types the identifier (and free-text notes) into the `gdpr_erasure` trigger form, so
Airflow keeps them in `dag_run.conf` and in the audit log's trigger row. Once the register
step has parked them in Vault, `scrub_request` replaces them with PARKED there: in the conf
of every erasure run of the request, and in every audit-log row of those runs (or of their
trigger) that holds them. It runs where the ORM is allowed: in the API server (the scrub
route) and in-process under `dag.test()`.

A submission the register step rejects (a malformed identifier, a reference already used
for someone else) parks nothing: `discard_run` replaces its identifier and notes with
DISCARDED in that one run and its audit-log rows, so a typo does not stay in Airflow either.

Under `dag.test()` the scrubbing task's own end would undo it: `TaskInstance.set_state`
merges the task's `dag_run` as loaded before the task ran, writing the old conf back. So
this process also remembers the runs it scrubbed (their ids only) and keeps their conf
scrubbed on any later UPDATE.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from airflow.models.dagrun import DagRun
from airflow.models.log import Log
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from erasure.submission import SCRUBBED

ERASURE_DAG_ID = "gdpr_erasure"
PARKED = SCRUBBED
DISCARDED = "[removed: submission rejected]"
PLACEHOLDERS = frozenset({PARKED, DISCARDED})
SECRET_KEYS = frozenset({"identifier", "notes"})


class ScrubResult(BaseModel):
    """How many rows one scrub rewrote; both 0 when it had been done before."""

    model_config = ConfigDict(frozen=True)

    runs: int  # dag_run rows whose conf changed
    log_rows: int  # audit-log rows whose `extra` changed


def scrub_request(session: Session, ref: str, *, dag_id: str = ERASURE_DAG_ID) -> ScrubResult:
    """Replace request `ref`'s identifier and notes in dag_run.conf and the audit log.

    Idempotent. The changes are flushed, not committed: the caller's session commits.
    """
    runs = _erasure_runs(session, dag_id, ref)
    return _scrub_runs(session, dag_id, runs, PARKED, mentions=[ref])


def discard_run(session: Session, run_id: str, *, dag_id: str = ERASURE_DAG_ID) -> ScrubResult:
    """Replace a rejected run's identifier and notes with DISCARDED; idempotent.

    The caller checks that the run owns no registered request (that one is scrubbed, not
    discarded). The changes are flushed, not committed.
    """
    run = session.scalars(
        sa.select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
    ).one_or_none()
    return _scrub_runs(session, dag_id, [run] if run is not None else [], DISCARDED)


def _scrub_runs(
    session: Session,
    dag_id: str,
    runs: Sequence[DagRun],
    placeholder: str,
    *,
    mentions: Sequence[str] = (),
) -> ScrubResult:
    """Put `placeholder` for the runs' secrets in their conf and in the audit rows that hold
    them: the runs' own rows and `dag_id`'s rows mentioning a secret or one of `mentions`."""
    secrets: set[str] = set()
    for run in runs:
        secrets |= _secret_values(run.conf or {})

    _keep_scrubbed(dag_id, [run.run_id for run in runs], placeholder)
    changed_runs = 0
    for run in runs:
        conf = run.conf or {}
        scrubbed = _scrub_json(conf, secrets, placeholder)
        if scrubbed != conf:
            run.conf = scrubbed  # a new object: the JSON column is not mutation-tracked
            changed_runs += 1

    changed_logs = 0
    run_ids = [r.run_id for r in runs]
    for row in _audit_rows(session, dag_id, [*mentions, *secrets], run_ids):
        extra = row.extra or ""
        scrubbed_extra = scrub_text(extra, secrets, placeholder)
        if scrubbed_extra != extra:
            row.extra = scrubbed_extra
            changed_logs += 1
    session.flush()
    return ScrubResult(runs=changed_runs, log_rows=changed_logs)


def scrub_text(text: str, secrets: Iterable[str], placeholder: str = PARKED) -> str:
    """`text` with the secrets replaced: per key and value if it is JSON, else by substring."""
    try:
        document = json.loads(text)
    except ValueError:
        return _replace(text, secrets, placeholder)
    scrubbed = _scrub_json(document, secrets, placeholder)
    return text if scrubbed == document else json.dumps(scrubbed)


# (dag_id, run_id) -> placeholder, for the runs this process scrubbed
_scrubbed_runs: dict[tuple[str, str], str] = {}
_guard_lock = threading.Lock()


def _keep_scrubbed(dag_id: str, run_ids: Iterable[str], placeholder: str) -> None:
    """Have every later UPDATE of these runs write their conf scrubbed."""
    with _guard_lock:
        if not sa.event.contains(DagRun, "before_update", _rescrub):
            sa.event.listen(DagRun, "before_update", _rescrub)
        _scrubbed_runs.update(((dag_id, run_id), placeholder) for run_id in run_ids)


def _rescrub(mapper: Any, connection: Any, run: DagRun) -> None:
    """ORM hook: a stale copy of a scrubbed run's conf (dag.test's merge) is scrubbed again."""
    if "conf" not in sa.inspect(run).dict:  # not loaded, so not about to be written
        return
    placeholder = _scrubbed_runs.get((run.dag_id, run.run_id))
    if placeholder is not None and isinstance(run.conf, dict):
        scrubbed = _scrub_json(run.conf, (), placeholder)
        if scrubbed != run.conf:
            run.conf = scrubbed


def _erasure_runs(session: Session, dag_id: str, ref: str) -> list[DagRun]:
    """The runs of `dag_id` for `ref`: conf.request_ref = ref, or run_id erasure-<ref>."""
    query = sa.select(DagRun).where(
        DagRun.dag_id == dag_id,
        sa.or_(
            DagRun.conf["request_ref"].as_string() == ref,
            DagRun.run_id == f"erasure-{ref}",
        ),
    )
    runs = session.scalars(query).all()
    return [r for r in runs if isinstance(r.conf, dict) and r.conf.get("request_ref", ref) == ref]


def _audit_rows(
    session: Session, dag_id: str, mentions: Iterable[str], run_ids: Sequence[str]
) -> list[Log]:
    """Audit-log rows of the runs, or of `dag_id` mentioning any of `mentions`."""
    matches = [Log.extra.contains(value, autoescape=True) for value in mentions]
    if run_ids:
        matches.append(Log.run_id.in_(run_ids))
    if not matches:
        return []
    query = sa.select(Log).where(Log.dag_id == dag_id, Log.extra.is_not(None), sa.or_(*matches))
    return list(session.scalars(query).all())


def _is_secret(value: Any) -> bool:
    if value is None or isinstance(value, bool | dict | list):
        return False
    text = str(value)
    return bool(text.strip()) and text not in PLACEHOLDERS


def _secret_values(value: Any) -> set[str]:
    """The values under SECRET_KEYS anywhere in a JSON document."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key in SECRET_KEYS and _is_secret(item):
                found.add(str(item))
            else:
                found |= _secret_values(item)
    elif isinstance(value, list):
        for item in value:
            found |= _secret_values(item)
    return found


def _scrub_json(value: Any, secrets: Iterable[str], placeholder: str) -> Any:
    secrets = tuple(secrets)
    if isinstance(value, dict):
        return {
            key: placeholder
            if key in SECRET_KEYS and _is_secret(item)
            else _scrub_json(item, secrets, placeholder)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_scrub_json(item, secrets, placeholder) for item in value]
    if isinstance(value, str):
        return _replace(value, secrets, placeholder)
    if value is not None and not isinstance(value, bool) and str(value) in secrets:
        return placeholder  # a numeric identifier such as a customer id
    return value


def _replace(text: str, secrets: Iterable[str], placeholder: str) -> str:
    # Longest first, so a secret inside another is not left half-replaced; any case.
    for secret in sorted(set(secrets), key=len, reverse=True):
        for form in {secret, json.dumps(secret)[1:-1]}:
            text = re.sub(re.escape(form), placeholder, text, flags=re.IGNORECASE)
    return text
