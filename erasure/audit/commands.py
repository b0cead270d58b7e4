"""`erasure audit list|show|verify|export|anchor`: the auditor's view of the completion records.

The store comes from ERASURE_STORE_URL; verify and export read the public keys from Vault
(ERASURE_VAULT_ADDR, ERASURE_VAULT_TOKEN) unless `verify --public-keys FILE` gives them, and
verify compares the chain with every head published in Vault (`erasure.audit.anchor`).
Errors are ErasureError (the `erasure` command prints them to stderr, exit 2); a broken chain
is a result: `verify` prints it and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from erasure.audit.anchor import VaultAnchorBoard
from erasure.audit.chain import Anchor
from erasure.audit.export import export_json, render_html
from erasure.audit.records import (
    NO_RECORDS,
    CompletionRecord,
    RecordError,
    RecordKind,
    RecordLedger,
    RecordStatus,
)
from erasure.audit.signing import DEFAULT_KEY_NAME, TransitSigner
from erasure.config import Settings
from erasure.errors import ErasureError
from erasure.store.database import open_store

EXIT_BROKEN = 1
_HEX64 = r"[0-9a-fA-F]{64}"

Handler = Callable[[argparse.Namespace], int]


def add_audit_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `audit list|show|verify|export` to the `erasure` command's subparsers."""
    audit = subparsers.add_parser(
        "audit", help="completion records: list, show, verify, export, anchor"
    )
    sub = audit.add_subparsers(metavar="WHAT")

    listing = sub.add_parser("list", help="list completion records in chain order")
    listing.add_argument("--since", type=_date, default=None, metavar="DATE", help="YYYY-MM-DD")
    listing.add_argument(
        "--status", choices=[s.value for s in RecordStatus], default=None, help="record status"
    )
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)

    show = sub.add_parser("show", help="every record of one request")
    show.add_argument("ref", metavar="REF", help="the request reference")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)

    verify = sub.add_parser("verify", help="walk the chain: hashes, links, sequence, signatures")
    verify.add_argument(
        "--public-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="JSON {version: base64 or PEM} to verify with instead of asking Vault",
    )
    verify.add_argument(
        "--anchor",
        default=None,
        metavar="SEQ:HASH",
        action="append",
        help="a head noted earlier (repeatable): fail if that record is gone or changed",
    )
    verify.add_argument(
        "--no-anchor",
        action="store_true",
        help="check the chain alone, without any published or noted head (a wiped store "
        "then verifies: say so in your report)",
    )
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=_verify)

    export = sub.add_parser("export", help="the evidence pack of one request")
    export.add_argument("ref", metavar="REF", help="the request reference")
    export.add_argument("--format", choices=["json", "html"], default="json")
    export.add_argument("--output", type=Path, default=None, metavar="FILE", help="default: stdout")
    export.set_defaults(handler=_export)

    anchor = sub.add_parser(
        "anchor", help="publish the chain head in Vault if it is behind (operators, once)"
    )
    anchor.set_defaults(handler=_anchor_head)


@contextmanager
def _ledger(with_vault: bool) -> Iterator[RecordLedger]:
    settings = Settings()
    signer = anchors = None
    if with_vault:
        from erasure.keys.vault import connect

        vault = connect(settings)
        signer = TransitSigner(vault, settings.vault_transit_mount, DEFAULT_KEY_NAME)
        anchors = VaultAnchorBoard(vault, settings.vault_kv_mount, settings.vault_anchor_path)
    with open_store(settings.store_url) as store:
        yield RecordLedger(store, signer, anchors)


def _list(args: argparse.Namespace) -> int:
    with _ledger(with_vault=False) as ledger:
        records = ledger.list(since=args.since, status=args.status)
    if args.json:
        _print_json([_summary(r) for r in records])
        return 0
    if not records:
        print("no completion records")
        return 0
    print(f"{'SEQ':>5}  {'CREATED (UTC)':<19}  {'REQUEST':<20} {'KIND':<10} {'STATUS':<24} SUBJECT")
    for r in records:
        print(
            f"{r.seq:>5}  {r.created_at:%Y-%m-%d %H:%M:%S}  {r.request_ref:<20} {r.kind.value:<10} "
            f"{(r.status.value if r.status else '-'):<24} {r.subject_hash[:12]}…"
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    with _ledger(with_vault=False) as ledger:
        records = ledger.show(args.ref)
    if not records:
        raise RecordError(NO_RECORDS)
    if args.json:
        _print_json([r.model_dump(mode="json") for r in records])
        return 0
    first = records[0]
    print(f"request {first.request_ref}  subject {first.subject_hash}")
    for r in records:
        status = f" [{r.status.value}]" if r.status else ""
        print(f"\n#{r.seq} {r.kind.value}{status}  {r.created_at.isoformat()}")
        print(f"  record_hash  {r.record_hash}")
        print(f"  prev_hash    {r.prev_hash}")
        print(f"  signature    {r.signature[:40]}… (key v{r.signing_key_version})")
        for line in _body_lines(r):
            print(f"  {line}")
    return 0


def _body_lines(record: CompletionRecord) -> list[str]:
    body = record.body
    if record.kind is RecordKind.REPLAYED:
        from pydantic import ValidationError

        from erasure.replay import ReplayBody, replay_lines

        try:
            return replay_lines(ReplayBody.model_validate(body))
        except ValidationError:
            pass  # shown as stored, below
    artefacts = body.get("artefacts")
    if not isinstance(artefacts, list):
        return [f"body: {json.dumps(body, ensure_ascii=False, sort_keys=True)}"]
    lines = []
    if "effective_erasure_date" in body:
        lines.append(f"effective erasure date: {body['effective_erasure_date']}")
    for item in artefacts:
        if isinstance(item, dict):
            lines.append(f"{item.get('action')!s:<14} {item.get('dataset')}")
            lines += _storage_lines(item.get("storage"))
    rulings = body.get("rulings")
    if isinstance(rulings, list):
        for ruling in rulings:
            if isinstance(ruling, dict):
                dataset = ruling.get("dataset") or ruling.get("dataset_name")
                author = ruling.get("author") or ruling.get("author_name")
                lines.append(
                    f"ruling: {dataset} -> {ruling.get('option')} by {author} "
                    f"at {ruling.get('decided_at')}"
                )
    return lines


def _storage_lines(storage: Any) -> list[str]:
    """An artefact's storage guarantees, one line each with its date (records signed before
    they were stated have none)."""
    if not isinstance(storage, list):
        return []
    lines = []
    for g in storage:
        if isinstance(g, dict):
            dated = next(
                (f" {label} {g[key]}" for key, label in
                 (("since", "since"), ("until", "until"), ("due", "due by")) if g.get(key)),
                "",
            )  # fmt: skip
            name = str(g.get("guarantee"))
            if name.endswith("_until"):  # backup_until 2027-03-04, not "backup_until until"
                dated = dated.replace(" until", "", 1)
            lines.append(f"{'':<14}   storage: {name}{dated}")
    return lines


def _verify(args: argparse.Namespace) -> int:
    keys = _read_keys(args.public_keys) if args.public_keys is not None else None
    anchors = [_anchor(text) for text in args.anchor or ()]
    with _ledger(with_vault=keys is None) as ledger:
        report = ledger.verify(public_keys=keys, anchors=anchors)
    if report.anchor_location is None and not anchors and not args.no_anchor:
        # A wiped store verifies on its own: without a head to compare, nothing is proven.
        report = report.unanchored(
            "it was compared with no published head (no Vault access) and no --anchor: give "
            "--anchor SEQ:HASH from an earlier audit, run with Vault access, or say "
            "--no-anchor to check the chain alone"
        )
    if args.json:
        _print_json(report.model_dump(mode="json"))
    else:
        print(report.summary())
        for problem in report.problems[1:]:
            print(f"  also: {problem.describe()}")
    return 0 if report.ok else EXIT_BROKEN


def _export(args: argparse.Namespace) -> int:
    with _ledger(with_vault=True) as ledger:
        pack = export_json(ledger, args.ref)
    text = (
        json.dumps(pack, indent=2, ensure_ascii=False) + "\n"
        if args.format == "json"
        else render_html(pack)
    )
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ErasureError(f"{args.output}: cannot write ({exc.strerror})") from None
    verdict = "verifies" if pack["verify"]["ok"] else "DOES NOT verify"
    print(f"wrote {args.output} ({len(pack['records'])} record(s); the pack {verdict})")
    return 0


def _anchor_head(args: argparse.Namespace) -> int:
    with _ledger(with_vault=True) as ledger:
        published = ledger.anchor_head()
        history = ledger.anchor_history()
    if history is None or history.newest is None:
        print("the chain is empty: nothing to publish")
        return 0
    newest = history.newest
    verb = "published" if published else "already published"
    print(f"{verb}: head seq {newest.seq} sha256:{newest.record_hash} at {history.location}")
    return 0


def _summary(record: CompletionRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"body", "signature"})


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a date YYYY-MM-DD") from None


def _anchor(text: str) -> Anchor:
    seq, sep, record_hash = text.partition(":")
    if not sep or not re.fullmatch(r"[0-9]{1,18}", seq) or not re.fullmatch(_HEX64, record_hash):
        raise ErasureError("--anchor must be SEQ:HASH, e.g. 42:<64 hex record_hash>")
    return Anchor(int(seq), record_hash.lower(), source="is the head you gave (--anchor)")


def _read_keys(path: Path) -> dict[int, str]:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ErasureError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError:
        raise ErasureError(f"{path}: not valid JSON") from None
    if isinstance(raw, dict) and isinstance(raw.get("public_keys"), dict):
        raw = raw["public_keys"]  # an evidence pack: use the keys it carries
    if not isinstance(raw, dict):
        raise ErasureError(f"{path}: must map key version -> public key (base64 or PEM)")
    keys: dict[int, str] = {}
    for version, key in raw.items():
        text = key.get("base64") if isinstance(key, dict) else key
        if not str(version).isdigit() or not isinstance(text, str):
            raise ErasureError(f"{path}: must map key version -> public key (base64 or PEM)")
        keys[int(version)] = text
    return keys
