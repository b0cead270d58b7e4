"""Evidence packs for auditors: one request's records, self-contained, checkable offline.

`export_json` gives the records in canonical form with their hashes and signatures, the
public keys that verify them, the chain segment that links them, and a `verify` block;
`verify_pack` re-checks such a pack with nothing but the pack (or keys the auditor trusts).
`export_html` renders the same for people: one file, no scripts or external assets.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from erasure.audit.canonical import GENESIS_HASH, canonical_json, canonical_time, sha256_hex
from erasure.audit.closure_graph import ACTION_COLOURS, UNKNOWN_COLOUR, closure_svg
from erasure.audit.evidence import ArtefactOutcome, CompletionEvidence
from erasure.audit.records import (
    NO_RECORDS,
    CompletionRecord,
    RecordError,
    RecordKind,
    RecordLedger,
)
from erasure.audit.signing import (
    SignatureFormatError,
    public_key_pem,
    signature_version,
    verify_with_public_key,
)

PACK_FORMAT = "erasure.evidence-pack/1"
CANONICAL_FORM = (
    "record_hash = lowercase hex SHA-256 of the UTF-8 bytes of the record without its "
    "'record_hash' and 'signature' members, serialised as JSON with keys sorted by code point "
    "at every level, separators ',' and ':' and no whitespace, non-ASCII characters written as "
    "themselves, integers in decimal (Python json.dumps(doc, sort_keys=True, "
    "separators=(',', ':'), ensure_ascii=False)). signature = Ed25519 over the ASCII bytes of "
    "record_hash, written vault:v<signing_key_version>:<base64>; check it with the public key "
    "of that version. Each record's prev_hash is the record_hash of the record before it "
    f"(the first record's is {GENESIS_HASH[:8]}... 64 zeros)."
)


class PackCheck(BaseModel):
    """The checks on one record of the pack."""

    seq: int
    kind: str
    hash_ok: bool
    signature_ok: bool
    linked: bool  # found in the chain segment with the same hash


class PackReport(BaseModel):
    """What `verify_pack` found; `first_problem` names the first bad record."""

    ok: bool
    records: list[PackCheck]
    segment_first: int
    segment_last: int
    segment_links_ok: bool
    segment_signatures_ok: bool
    head_seq: int
    first_problem: str | None
    problems: list[str]
    verified_at: datetime


# ---------------------------------------------------------------------------------------------
# JSON


def record_document(record: CompletionRecord) -> dict[str, Any]:
    """A record as the pack holds it: its canonical hash document plus hash and signature."""
    return {
        **record.hash_document(),
        "record_hash": record.record_hash,
        "signature": record.signature,
    }


def export_json(ledger: RecordLedger, ref: str) -> dict[str, Any]:
    """The self-contained evidence pack of request `ref`."""
    records = ledger.show(ref)
    if not records:
        raise RecordError(NO_RECORDS)
    links = ledger.links(records[0].seq, records[-1].seq)
    head_seq, head_hash = ledger.head()
    versions = {r.signing_key_version for r in records}
    versions |= {int(link["signing_key_version"]) for link in links}
    keys = ledger.public_keys()
    pack: dict[str, Any] = {
        "format": PACK_FORMAT,
        "request_ref": ref,
        "subject_hash": records[0].subject_hash,
        "generated_at": canonical_time(datetime.now(UTC)),
        "canonical_form": CANONICAL_FORM,
        "records": [record_document(r) for r in records],
        "public_keys": {
            str(v): {"algorithm": "ed25519", "base64": keys[v], "pem": public_key_pem(keys[v])}
            for v in sorted(versions)
            if v in keys
        },
        "chain": {
            "genesis_hash": GENESIS_HASH,
            "segment": [
                {
                    **link,
                    "seq": int(link["seq"]),
                    "signing_key_version": int(link["signing_key_version"]),
                }
                for link in links
            ],
            "head": {"seq": head_seq, "record_hash": head_hash},
        },
    }
    pack["verify"] = verify_pack(pack).model_dump(mode="json")
    return pack


def verify_pack(
    pack: Mapping[str, Any], public_keys: Mapping[int, str] | None = None
) -> PackReport:
    """Check a pack offline: hashes, signatures, the segment's links, the records in it.

    `public_keys` (version -> base64 or PEM) are keys the auditor trusts, e.g. read from Vault
    independently; without them the pack's own keys are used.
    """
    keys: dict[int, str] = (
        {int(v): k for v, k in public_keys.items()}
        if public_keys is not None
        else {int(v): str(k["base64"]) for v, k in dict(pack.get("public_keys") or {}).items()}
    )
    problems: list[str] = []
    chain = dict(pack.get("chain") or {})
    segment: list[dict[str, Any]] = list(chain.get("segment") or [])
    by_seq = {int(link["seq"]): link for link in segment}

    checks: list[PackCheck] = []
    for doc in pack.get("records") or []:
        seq, kind = int(doc.get("seq", 0)), str(doc.get("kind"))
        stated = str(doc.get("record_hash"))
        content = {k: v for k, v in doc.items() if k not in ("record_hash", "signature")}
        hash_ok = sha256_hex(canonical_json(content)) == stated
        signature_ok = _signature_ok(keys, doc, stated)
        link = by_seq.get(seq)
        linked = link is not None and link.get("record_hash") == stated
        if doc.get("request_ref") != pack.get("request_ref"):
            problems.append(f"seq {seq}: belongs to another request")
        if not hash_ok:
            problems.append(f"seq {seq}: content does not match its record_hash (edited)")
        if not signature_ok:
            problems.append(f"seq {seq}: signature does not verify with the public key")
        if not linked:
            problems.append(f"seq {seq}: not in the chain segment with this hash")
        checks.append(
            PackCheck(seq=seq, kind=kind, hash_ok=hash_ok, signature_ok=signature_ok, linked=linked)
        )

    links_ok, signatures_ok = True, True
    previous: dict[str, Any] | None = None
    for link in segment:
        seq = int(link["seq"])
        if previous is not None:
            if seq != int(previous["seq"]) + 1:
                links_ok = False
                problems.append(f"segment: seq {int(previous['seq']) + 1} is missing")
            elif link.get("prev_hash") != previous.get("record_hash"):
                links_ok = False
                problems.append(f"segment: seq {seq} does not link to seq {previous['seq']}")
        if not _signature_ok(keys, link, str(link.get("record_hash"))):
            signatures_ok = False
            problems.append(f"segment: the signature of seq {seq} does not verify")
        previous = link
    head_seq = int(dict(chain.get("head") or {}).get("seq", 0))
    last = int(segment[-1]["seq"]) if segment else 0
    if head_seq < last:
        problems.append(f"chain head seq {head_seq} is behind the segment's last seq {last}")
    return PackReport(
        ok=not problems,
        records=checks,
        segment_first=int(segment[0]["seq"]) if segment else 0,
        segment_last=last,
        segment_links_ok=links_ok,
        segment_signatures_ok=signatures_ok,
        head_seq=head_seq,
        first_problem=problems[0] if problems else None,
        problems=problems,
        verified_at=datetime.now(UTC),
    )


def _signature_ok(keys: Mapping[int, str], doc: Mapping[str, Any], record_hash: str) -> bool:
    signature = str(doc.get("signature", ""))
    try:
        version = signature_version(signature)
    except SignatureFormatError:
        return False
    key = keys.get(version)
    if key is None or version != int(doc.get("signing_key_version", -1)):
        return False
    try:
        return verify_with_public_key(key, record_hash.encode("ascii"), signature)
    except SignatureFormatError:
        return False


# ---------------------------------------------------------------------------------------------
# HTML


def export_html(ledger: RecordLedger, ref: str) -> str:
    """The evidence pack of request `ref` as one self-contained HTML page."""
    return render_html(export_json(ledger, ref))


def render_html(pack: Mapping[str, Any]) -> str:
    """An evidence pack (from `export_json`) as HTML; every value is escaped."""
    records: list[dict[str, Any]] = list(pack["records"])
    completed = next((r for r in reversed(records) if r.get("kind") == RecordKind.COMPLETED), None)
    latest_with_artefacts = next((r for r in reversed(records) if "artefacts" in r["body"]), None)
    evidence = _evidence(completed["body"]) if completed else None
    artefacts = _artefacts(latest_with_artefacts["body"]) if latest_with_artefacts else []
    report = dict(pack.get("verify") or {})
    ref = str(pack["request_ref"])
    status = (
        str(completed.get("status")) if completed else f"in progress (last: {records[-1]['kind']})"
    )
    replayed = next((r for r in records if r.get("kind") == RecordKind.REPLAYED), None)
    if replayed is not None:
        status = "restore replay: erased again, citing the requests below"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Erasure evidence: {_e(ref)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Erasure evidence &mdash; request {_e(ref)}</h1>",
        _summary(pack, status, evidence, report),
    ]
    if replayed is not None:
        parts += ["<h2>Restore replay</h2>", _replay(replayed["body"])]
    else:
        parts += [
            "<h2>Closure graph</h2>",
            closure_svg(artefacts) if artefacts else "<p>No artefacts recorded yet.</p>",
            "<h2>Artefacts</h2>",
            _artefact_table(artefacts),
        ]
    if evidence is not None:
        parts += [
            "<h2>DPO rulings</h2>",
            _rulings_table(evidence),
            "<h2>Verification (second look)</h2>",
            _checks_table(evidence),
            "<h2>Lineage</h2>",
            _lineage(evidence),
        ]
    parts += [
        "<h2>Records and signatures</h2>",
        _records_table(records, report),
        "<h2>How to verify</h2>",
        f"<p>{_e(str(pack.get('canonical_form', CANONICAL_FORM)))}</p>",
        _keys(pack),
        "</body></html>",
    ]
    return "\n".join(parts)


def _e(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return html.escape(text, quote=True)


def _evidence(body: Mapping[str, Any]) -> CompletionEvidence | None:
    try:
        return CompletionEvidence.model_validate(body)
    except ValidationError:
        return None


def _artefacts(body: Mapping[str, Any]) -> list[ArtefactOutcome]:
    items: list[ArtefactOutcome] = []
    for raw in body.get("artefacts") or []:
        try:
            items.append(ArtefactOutcome.model_validate(raw))
        except ValidationError:
            continue
    return items


def _summary(
    pack: Mapping[str, Any],
    status: str,
    evidence: CompletionEvidence | None,
    report: Mapping[str, Any],
) -> str:
    subject = f"<code>{_e(pack['subject_hash'])}</code>"
    if status.startswith("restore replay"):
        subject = "none: a replay covers the cited requests' subjects (their tombstones below)"
    rows: list[tuple[str, str]] = [
        ("Request", _e(pack["request_ref"])),
        ("Subject (keyed hash)", subject),
        ("Status", f'<span class="status">{_e(status)}</span>'),
    ]
    if evidence is not None:
        t = evidence.timestamps
        rows += [
            ("Received", _e(t.received.isoformat())),
            ("Due", _e(t.due.isoformat())),
            ("Completed", _e(t.completed.isoformat())),
            (
                "Effective erasure date",
                f"<strong>{_e(str(evidence.effective_erasure_date))}</strong>",
            ),
            ("Lineage snapshot", f"<code>{_e(evidence.lineage.snapshot_id)}</code>"),
            (
                "Lineage coverage",
                _e(f"{evidence.lineage.coverage:.1%} ({len(evidence.lineage.gaps)} gap(s))"),
            ),
            ("Verification", _ok(evidence.verification.passed)),
        ]
    first = report.get("first_problem")
    rows.append(
        (
            "Records, hashes and signatures",
            _ok(bool(report.get("ok"))) + (f" &mdash; {_e(first)}" if first else ""),
        )
    )
    rows.append(("Exported", _e(pack.get("generated_at", ""))))
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="summary">{body}</table>'


def _replay(body: Mapping[str, Any]) -> str:
    """A `replayed` record's body (erasure.replay): the table, the rows erased again for each
    cited request with its completion record, and the second read."""
    dataset = body.get("dataset") or {}
    check = body.get("verification") or {}
    facts = [
        ("Restored table", f"<code>{_e(dataset.get('namespace', ''))}/"
         f"{_e(dataset.get('name', ''))}</code>"),
        ("Rows erased again", _e(body.get("rows_erased", ""))),
        ("Identifier columns", _e(body.get("identifier_columns", {}))),
        ("Pepper versions hashed under", _e(body.get("pepper_versions", []))),
        ("Tombstones checked", _e(body.get("tombstones_checked", ""))),
        ("Replayed", _e(body.get("replayed_at", ""))),
        ("Second read", _ok(bool(check.get("passed"))) + " &mdash; "
         + _e(f"{check.get('tombstoned_rows_remaining')} row(s) hash to a tombstone; other "
              f"people's rows {check.get('others_before')} before, {check.get('others_after')} "
              f"after ({check.get('method', '')})")),
    ]  # fmt: skip
    summary = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    head = "<tr><th>Request</th><th>Rows</th><th>Completion record</th><th>Tombstones</th></tr>"
    rows = []
    for cited in body.get("cited") or []:
        done = cited.get("completion") or {}
        record = (
            f"seq {_e(done.get('seq'))} ({_e(done.get('status', ''))}, "
            f"{_e(done.get('completed_at', ''))})<br><code>{_e(done.get('record_hash', ''))}</code>"
            if done
            else _e(cited.get("on_record") or "no completed record")
        )
        stones = "<br>".join(
            f"{_e(t.get('identifier_type', ''))} v{_e(t.get('pepper_version', ''))} "
            f"<code>{_e(t.get('subject_hash', ''))}</code>"
            for t in cited.get("tombstones") or []
        )
        rows.append(
            f"<tr><td>{_e(cited.get('request_ref') or '(tombstones of no request)')}</td>"
            f"<td>{_e(cited.get('rows', ''))}</td><td>{record}</td><td>{stones}</td></tr>"
        )
    cited_table = f"<table>{head}{''.join(rows)}</table>" if rows else "<p>Nothing found.</p>"
    return f'<table class="summary">{summary}</table><h3>Cited requests</h3>{cited_table}'


def _ok(passed: bool) -> str:
    return '<span class="ok">passed</span>' if passed else '<span class="bad">FAILED</span>'


def _action_cell(action: str) -> str:
    fill, text = ACTION_COLOURS.get(action, UNKNOWN_COLOUR)
    return f'<td class="action" style="background:{fill};color:{text}">{_e(action)}</td>'


def _evidence_list(evidence: Mapping[str, Any]) -> str:
    if not evidence:
        return ""
    items = "".join(f"<li><b>{_e(str(k))}</b>: {_e(v)}</li>" for k, v in sorted(evidence.items()))
    return f'<ul class="evidence">{items}</ul>'


def _artefact_table(artefacts: Sequence[ArtefactOutcome]) -> str:
    if not artefacts:
        return "<p>None.</p>"
    head = "<tr><th>Dataset</th><th>Kind</th><th>Action</th><th>Rule</th><th>Reason</th>"
    head += "<th>Storage guarantees</th><th>Evidence</th></tr>"
    rows = "".join(
        f"<tr><td><code>{_e(a.dataset)}</code></td><td>{_e(a.kind or '')}</td>"
        f"{_action_cell(a.action.value)}<td>{_e(a.rule or '')}</td><td>{_e(a.reason or '')}</td>"
        f"<td>{_storage_list(a)}</td><td>{_evidence_list(a.evidence)}</td></tr>"
        for a in artefacts
    )
    return f"<table>{head}{rows}</table>"


def _storage_list(artefact: ArtefactOutcome) -> str:
    """The artefact's storage guarantees, each with its date and what it means."""
    if "storage" not in artefact.model_fields_set:
        return "<em>not stated (recorded before storage guarantees were)</em>"
    if not artefact.storage:
        return "<em>none</em>"
    items = []
    for g in artefact.storage:
        dated = next(
            (f" {label} {_e(str(d))}" for label, d in
             (("since", g.since), ("until", g.until), ("due by", g.due)) if d is not None),
            "",
        )  # fmt: skip
        if g.guarantee.endswith("_until"):  # backup_until 2027-03-04, not "... until ..."
            dated = dated.replace(" until", "", 1)
        detail = ", ".join(f"{_e(str(k))}: {_e(v)}" for k, v in sorted(g.detail.items()))
        items.append(
            f"<li><b>{_e(g.guarantee)}</b>{dated}: {_e(g.means)}"
            + (f" <small>({detail})</small>" if detail else "")
            + "</li>"
        )
    return f'<ul class="storage">{"".join(items)}</ul>'


def _rulings_table(evidence: CompletionEvidence) -> str:
    if not evidence.rulings:
        return "<p>No escalations needed a ruling.</p>"
    head = "<tr><th>Dataset</th><th>Option</th><th>Author</th><th>Decided</th>"
    head += (
        "<th>Justification</th><th>Exemption</th><th>Rebuild by</th><th>Standing until</th></tr>"
    )
    rows = "".join(
        f"<tr><td><code>{_e(r.dataset)}</code></td><td>{_e(r.option)}</td><td>{_e(r.author)}</td>"
        f"<td>{_e(r.decided_at.isoformat())}</td><td>{_e(r.justification)}</td>"
        f"<td>{_e(r.exemption or '')}</td><td>{_e(str(r.rebuild_by_date or ''))}</td>"
        f"<td>{_e(str(r.standing_until or ''))}</td></tr>"
        for r in evidence.rulings
    )
    return f"<table>{head}{rows}</table>"


def _checks_table(evidence: CompletionEvidence) -> str:
    v = evidence.verification
    head = "<tr><th>Target</th><th>Check</th><th>Result</th><th></th></tr>"
    rows = "".join(
        f"<tr><td><code>{_e(c.target)}</code></td><td>{_e(c.check)}</td><td>{_e(c.result)}</td>"
        f"<td>{_ok(c.passed)}</td></tr>"
        for c in v.checks
    )
    checked = f"<p>Checked at {_e(v.checked_at.isoformat())}: {_ok(v.passed)}</p>"
    return f"{checked}<table>{head}{rows}</table>"


def _lineage(evidence: CompletionEvidence) -> str:
    gaps = "".join(
        f"<li>{_e(str(g.get('kind', 'gap')))}: {_e(str(g.get('detail', '')))}"
        f"{' (' + _e(str(g['dataset'])) + ')' if g.get('dataset') else ''}</li>"
        for g in evidence.lineage.gaps
    )
    return (
        f"<p>Snapshot <code>{_e(evidence.lineage.snapshot_id)}</code>, coverage "
        f"{_e(f'{evidence.lineage.coverage:.1%}')}.</p>"
        + (f"<ul>{gaps}</ul>" if gaps else "<p>No gaps.</p>")
    )


def _records_table(records: Sequence[Mapping[str, Any]], report: Mapping[str, Any]) -> str:
    checks = {int(c["seq"]): c for c in report.get("records") or []}
    head = "<tr><th>Seq</th><th>Kind</th><th>Status</th><th>Created</th><th>Record hash</th>"
    head += "<th>Key version</th><th>Hash</th><th>Signature</th><th>Linked</th></tr>"
    rows = []
    for r in records:
        c = checks.get(int(r["seq"]), {})
        rows.append(
            f"<tr><td>{_e(str(r['seq']))}</td><td>{_e(r['kind'])}</td>"
            f"<td>{_e(r.get('status') or '')}</td><td>{_e(r['created_at'])}</td>"
            f"<td><code>{_e(r['record_hash'])}</code></td>"
            f"<td>{_e(str(r['signing_key_version']))}</td>"
            f"<td>{_ok(bool(c.get('hash_ok')))}</td><td>{_ok(bool(c.get('signature_ok')))}</td>"
            f"<td>{_ok(bool(c.get('linked')))}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _keys(pack: Mapping[str, Any]) -> str:
    keys = dict(pack.get("public_keys") or {})
    blocks = "".join(
        f"<h3>Signing key version {_e(v)} (Ed25519)</h3><pre>{_e(str(k.get('pem', '')))}</pre>"
        for v, k in sorted(keys.items(), key=lambda kv: int(kv[0]))
    )
    return blocks or "<p>No public keys in this pack.</p>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#1b1b1b;max-width:1200px}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .5em;text-align:left;vertical-align:top}
table.summary th{background:#f4f6f7;width:16em}
code,pre{font-family:monospace;font-size:.92em;word-break:break-all}
td.action{font-weight:600}ul.evidence,ul.storage{margin:0;padding-left:1.1em}
.ok{color:#1e8449;font-weight:600}.bad{color:#c0392b;font-weight:700}
.status{font-weight:700}svg.closure{border:1px solid #ddd;background:#fcfcfc}
"""
