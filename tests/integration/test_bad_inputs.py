"""Hostile input at every door that parses it: the catalog file, a typed subject identifier,
lineage SQL files, OpenLineage events, the ingest endpoint's bodies and headers, query
strings and the command line.

Each case is generated from the standard or format it breaks (RFC 5322, E.164, Unicode's
categories and surrogates, YAML anchors, the OpenLineage RunEvent schema, HTTP framing)
and names the refusal it expects: a status or exit code and a fragment of the message.
Every case is played through the real door (the ingest route on a SQLite and a Postgres
store, the `erasure` command, the planner's lineage, the desk's request checks) with a
canary string inside it, and must end

- refused clearly: the expected code and message;
- without a traceback (no "Traceback", no 500) and within BOUND_SECONDS (a hang fails);
- without echoing the canary in the answer, stdout or stderr;
- with every good event sent beside a bad one stored (a bad event costs only itself).

The counts are published in docs/reliability.md (section `bad-inputs`).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import string
import threading
import time
import traceback
import unicodedata
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import load_catalog
from erasure.cli import main
from erasure.config import Settings
from erasure.errors import ErasureError
from erasure.identifier_types import refuse_misfit
from erasure.lineage.sources import build_lineage
from erasure.model import GapKind
from erasure.submission import ErasureRequest
from erasure.warehouse import Warehouse
from tests.integration.published import publish

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
# Letters and digits only, lower case: it fits in an identifier, a name, a literal, a header.
# The same in every pytest-xdist worker of one run (parametrize ids carry it), new each run.
CANARY = f"cnry{os.environ.get('PYTEST_XDIST_TESTRUNUID', uuid.uuid4().hex)[:12]}"
BOUND_SECONDS = 10.0  # per case; the slowest (a 10 MB identifier, a gzip bomb) take < 1 s
LINEAGE_KEY = "ol-" + "b" * 29
BODY_CAP = 1024 * 1024  # the ingest cap, lowered from 64 MiB so a case past it is cheap
BACKENDS = ("SQLite", "Postgres")


@dataclass(frozen=True)
class Case:
    """One hostile input: its door, its family, the refusal it expects."""

    door: str
    family: str
    name: str
    payload: Any
    code: int  # HTTP status, exit code of `erasure`, or 0 where the answer is a gap
    fragment: str  # in the message (or the gap) that refuses it
    store: bool = False  # played on SQLite and on Postgres

    @property
    def id(self) -> str:
        return f"{self.door}/{self.family}/{self.name}"


@dataclass
class Outcome:
    case: Case
    backend: str
    code: int | None = None
    text: str = ""  # what a user reads: the answer, stderr, the gap
    seconds: float = 0.0
    hung: bool = False
    traceback: bool = False
    neighbours_lost: int = 0  # good events sent beside it and not stored
    problems: list[str] = field(default_factory=list)

    def judge(self) -> None:
        case = self.case
        if self.hung:
            self.problems.append(f"hung (> {BOUND_SECONDS} s)")
            return
        if self.traceback or "Traceback" in self.text or self.code == 500:
            self.problems.append("traceback / 500")
        # `erasure plan` refuses what the desk answers with 422: exit 2.
        expected = 2 if self.backend == "erasure plan" else case.code
        if self.code != expected:
            self.problems.append(f"code {self.code}, expected {expected}")
        if case.fragment not in self.text:
            self.problems.append(f"message lacks {case.fragment!r}")
        if CANARY in self.text:
            self.problems.append("the input was echoed")
        if self.neighbours_lost:
            self.problems.append(f"{self.neighbours_lost} good neighbour(s) lost")

    @property
    def clear(self) -> bool:
        return not self.problems


# ---------------------------------------------------------------------------------------------
# The corpus, generated family by family


GOOD_CATALOG = """\
version: 1
identifiers: {email: {normalise: email}, phone: {normalise: e164}, customer_id: {normalise: strip}}
connections: {warehouse: {url: "sqlite:///wh.db"}}
datasets:
  - {namespace: w, name: crm.customers, connection: warehouse, kind: table,
     holds_subject: {email: [email], customer_id: id}}
  - {namespace: w, name: reports.good, connection: warehouse, kind: table}
  - {namespace: w, name: reports.hostile, connection: warehouse, kind: table}
lineage:
  sql: [{path: "sql/*.sql"}]
"""


def _laughs(levels: int, width: int = 9) -> str:
    lines = [f"l0: &l0 [{', '.join([repr(CANARY)] * width)}]"]
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * width) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def _dataset(name: str, **fields: str) -> str:
    extra = "".join(f", {k}: {v}" for k, v in fields.items())
    return GOOD_CATALOG.replace(
        "  - {namespace: w, name: reports.good,",
        f'  - {{namespace: w, name: "{name}", kind: table{extra}}}\n'
        "  - {namespace: w, name: reports.good,",
    )


def catalog_cases() -> list[Case]:
    cases: list[Case] = []

    def add(family: str, name: str, text: str | bytes, fragment: str) -> None:
        cases.append(Case("catalog", family, name, text, 2, fragment))

    # YAML anchors: each level nine aliases of the one before (the "billion laughs").
    for levels in (7, 8, 9, 12, 30):
        add(
            "YAML aliases",
            f"laughs x9^{levels}",
            "version: 1\n" + _laughs(levels),
            "aliases expand to more than 1,000,000 values",
        )
    add(
        "YAML aliases",
        "wide laughs 1000^2",
        "version: 1\n" + _laughs(3, 1000),
        "aliases expand to more than 1,000,000 values",
    )
    add(
        "YAML aliases",
        "self-loop list",
        f"version: 1\n{CANARY}: &a [1, *a]\n",
        "refers to a node that contains it",
    )
    add(
        "YAML aliases",
        "self-loop mapping",
        f"version: 1\nx: &a {{{CANARY}: *a}}\n",
        "refers to a node that contains it",
    )
    add("YAML aliases", "undefined alias", f"version: 1\nx: *{CANARY}\n", "undefined alias")
    # Nesting: YAML's flow collections, far deeper than any catalog.
    for depth in (2_000, 50_000):
        add(
            "nesting",
            f"{depth} lists",
            f"version: 1\nx: {'[' * depth}{CANARY}{']' * depth}\n",
            "not valid YAML",
        )
        add(
            "nesting",
            f"{depth} mappings",
            f"version: 1\nx: {'{a: ' * depth}{CANARY}{'}' * depth}\n",
            "not valid YAML",
        )
    # Encodings: a catalog is UTF-8 text.
    for encoding in ("latin-1", "utf-16", "utf-32", "cp1252"):
        text = GOOD_CATALOG.replace(
            "crm.customers", "crm.cüstomers€" if encoding == "cp1252" else "crm.cüstomers"
        )
        add("encoding", encoding, f"# {CANARY}\n{text}".encode(encoding), "is not UTF-8 text")
    add("encoding", "NUL byte", GOOD_CATALOG.encode() + b"\x00" + CANARY.encode(), "not valid YAML")
    # Syntax: PyYAML's reason and place, never the text around it.
    add("syntax", "tab indentation", f"version: 1\n\t{CANARY}: 1\n", "not valid YAML")
    add("syntax", "unclosed flow", f"version: 1\nx: [{CANARY}, \n", "not valid YAML")
    add("syntax", "two documents", f"version: 1\n---\n{CANARY}: 1\n", "not valid YAML")
    add(
        "syntax",
        "python tag",
        f"version: 1\nx: !!python/object:os.system {CANARY}\n",
        "not valid YAML",
    )
    # The top level.
    for name, text in (
        ("a list", f"- {CANARY}\n"),
        ("a scalar", f"{CANARY}\n"),
        ("empty", f"# {CANARY}\n"),
        ("null", f"~ # {CANARY}\n"),
    ):
        add("top level", name, text, "the catalog must be a mapping")
    # Dataset names (the catalog's identities, also SQLite file names and SQL identifiers).
    for name, fragment in (
        (f"../../{CANARY}", "must not hold a '.' or '..' path segment"),
        (f"s3://b/./{CANARY}@x", "must not hold a '.' or '..' path segment"),
        (f"..\\\\{CANARY}@x", "must not hold a '.' or '..' path segment"),
        (f"{CANARY}@x\\0", "must not hold control characters"),
        (f"{CANARY}@x\\n", "must not hold control characters"),
        (f"{CANARY}@x\\x1b[2J", "must not hold control characters"),
        ("   ", "must not be blank"),
        (f"{CANARY}@" + "x" * 600, "must be at most 512 characters"),
    ):
        add(
            "dataset names",
            repr(name)[:24].replace(CANARY, "…"),
            _dataset(name),
            f"dataset #2 field 'name': {fragment}",
        )
    for name in (f"{CANARY}/x.t", f"a.b/{CANARY}.t", f"{CANARY}@x.t"):
        add(
            "dataset names",
            f"SQLite schema {name.replace(CANARY, '…')}",
            _dataset(name, connection="warehouse"),
            "schema name(s) of its datasets are not",
        )
    # Fields of the wrong type or out of range.
    for fragment_name, find, replace in (
        ("version 2", "version: 1", "version: 2"),
        ("version text", "version: 1", f"version: {CANARY}"),
        ("k_threshold negative", "version: 1", "version: 1\nk_threshold: -3"),
        ("k_threshold text", "version: 1", f"version: 1\nk_threshold: {CANARY}"),
        ("sla_days a list", "version: 1", f"version: 1\nsla_days: [{CANARY}]"),
        ("unknown field", "version: 1", f"version: 1\n{CANARY}@x: 1"),
        ("unknown kind", "kind: table,\n     holds", f"kind: {CANARY},\n     holds"),
        ("unknown normaliser", "normalise: email", f"normalise: {CANARY}"),
        ("datasets not a list", "datasets:\n", f"datasets: {CANARY}\nx:\n"),
        ("holds_subject unknown type", "holds_subject: {email", f"holds_subject: {{{CANARY}@x"),
    ):
        add("fields", fragment_name, GOOD_CATALOG.replace(find, replace, 1), "invalid catalog")
    return cases


def identifier_cases() -> list[Case]:
    """Typed subject identifiers, as the desk checks them before anything is sealed."""
    cases: list[Case] = []
    c = CANARY

    def add(family: str, name: str, id_type: str, value: str, fragment: str) -> None:
        cases.append(Case("identifier", family, name, (id_type, value), 422, fragment))

    form = "this cannot be an email"
    # RFC 5322 addr-spec: the specials may not stand unquoted in a dot-atom local part.
    for special in '()<>[]:;,\\" ':
        add(
            "RFC 5322 specials",
            f"U+{ord(special):04X} in local part",
            "email",
            f"{c}{special}x@example.org",
            form,
        )
    # Its structure.
    for name, value in (
        ("no @", f"{c}.example.org"),
        ("two @", f"{c}@x@example.org"),
        ("empty local", "@" + c),
        ("empty domain", f"{c}@"),
        ("leading dot", f".{c}@example.org"),
        ("trailing dot", f"{c}.@example.org"),
        ("double dot", f"{c}..x@example.org"),
        ("local 65 octets", c + "x" * (65 - len(c)) + "@example.org"),
        ("local 64 octets of UTF-8", c + "é" * 30 + "@example.org"),
        ("label 64", f"{c}@" + "x" * 64 + ".org"),
        ("label hyphen", f"{c}@-x.org"),
        ("domain double dot", f"{c}@x..org"),
        ("bad literal", f"{c}@[300.1.1.1]"),
        ("underscore host", f"{c}@x_y.org"),
    ):
        add("RFC 5322 structure", name, "email", value, form)
    # C0 controls and DEL inside the local part (whitespace ones end the address early).
    for code in [*range(0x00, 0x20), 0x7F]:
        add("C0 controls", f"U+{code:04X}", "email", f"{c}{chr(code)}x@example.org", form)
    # E.164 as written (E.123, RFC 3966): digits, one leading +, separators, an extension.
    for name, value in (
        ("letters", f"+44 {c}"),
        ("16 digits", "+" + "4" * 16 + c[:0]),
        ("plus alone", "+"),
        ("two plus", f"++44 20 7946 0958 {c}"),
        ("extension letters", f"+44 20 7946 0958;ext={c}"),
        ("NUL", f"+44\x0020 {c}"),
        ("email", f"{c}@example.org"),
    ):
        add("E.164", name, "phone", value, "phone")
    # Opaque ids: no space of any kind inside (Unicode's Zs, NFKC-composed), no controls.
    spaces = [ch for ch in map(chr, range(0x3001)) if unicodedata.category(ch) == "Zs"]
    for ch in spaces:
        add(
            "Unicode spaces (Zs)",
            f"U+{ord(ch):04X}",
            "customer_id",
            f"{c}{ch}x",
            "holds no spaces or control characters",
        )
    for code in (0x00, 0x07, 0x1B, 0x7F, 0x85):
        add(
            "Unicode controls (Cc)",
            f"U+{code:04X}",
            "customer_id",
            f"{c}{chr(code)}x",
            "holds no spaces or control characters",
        )
    add(
        "another type",
        "address as customer id",
        "customer_id",
        f"{c}@example.org",
        "looks like an email address",
    )
    # Surrogates: a JSON escape without its pair is no text at all.
    for id_type, value in (
        ("email", f"{c}\ud800@example.org"),
        ("phone", f"+44 20 {c}\udfff"),
        ("customer_id", f"{c}\udc80"),
    ):
        add("lone surrogates", id_type, id_type, value, "holds a lone surrogate")
    # Length: the field allows 512 characters, a pasted file is refused before any parsing.
    for id_type, value in (
        ("email", c + "x" * 600 + "@example.org"),
        ("customer_id", c * (10 * 1024 * 1024 // len(c))),
        ("phone", "+44" + "1" * 509 + c),
    ):
        add("length", f"{id_type} {len(value):,} chars", id_type, value, "at most 512 characters")
    add("blank", "NFKC spaces only", "email", "\u3000\u2003 ", "non-empty text")
    add("type", "unknown identifier type", f"x{c}", c, "identifier type of the catalog")
    return cases


def sql_cases() -> list[Case]:
    """Lineage SQL files: a gap on that file's dataset, never a failed plan."""
    cases: list[Case] = []
    literal = f"'{CANARY}'"

    def add(family: str, name: str, content: bytes, fragment: str) -> None:
        cases.append(Case("sql", family, name, content, 0, fragment))

    body = f"SELECT c.id AS id, {literal} AS tag FROM crm.customers AS c"
    for encoding in ("latin-1", "cp1252", "utf-16", "utf-32", "shift_jis"):
        add(
            "encoding",
            encoding,
            (body + " -- naïve ünïcödé ガ€").encode(encoding, "replace"),
            "is not UTF-8 text",
        )
    add("encoding", "lone continuation byte", body.encode() + b"\x80", "is not UTF-8 text")
    add("encoding", "NUL", body.encode() + b"\x00", "holds a NUL character")
    for depth in (60, 500, 3000):
        add(
            "nesting",
            f"parentheses {depth}",
            _parenthesised(depth, literal).encode(),
            "nests too deeply for the SQL parser",
        )
    for terms in (1000, 5000):
        add(
            "nesting",
            f"operators {terms}",
            (
                f"SELECT {' + '.join(['c.id'] * terms)} AS id, {literal} AS t "
                "FROM crm.customers AS c"
            ).encode(),
            "nests too deeply for the SQL parser",
        )
    add(
        "nesting",
        "subqueries 300",
        (
            "SELECT id FROM "
            + "(SELECT id FROM " * 300
            + "crm.customers"
            + ") AS s" * 300
            + f" WHERE id = {literal}"
        ).encode(),
        "nests too deeply for the SQL parser",
    )
    add(
        "size",
        "5 MiB",
        (body + ";\n").encode() * (5 * 1024 * 1024 // len(body)),
        "is larger than 4 MiB",
    )
    add(
        "syntax",
        "unterminated string",
        f"SELECT '{CANARY} FROM crm.customers".encode(),
        "could not be parsed",
    )
    add("syntax", "garbage", f"SELEKT ))) {literal} ((( FROM".encode(), "could not be parsed")
    return cases


def _parenthesised(depth: int, literal: str) -> str:
    return f"SELECT {'(' * depth}c.id{')' * depth} AS id, {literal} AS t FROM crm.customers c"


def _event(_run: str, _output: str = "marts.good", **changes: Any) -> dict[str, Any]:
    """A well-formed COMPLETE event of job `build` writing `output` from crm.customers."""
    event: dict[str, Any] = {
        "eventType": "COMPLETE",
        "eventTime": "2026-11-01T02:00:00+00:00",
        "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.24.2/client/python",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": _run},
        "job": {"namespace": "airflow", "name": f"build_{CANARY}"},
        "inputs": [{"namespace": "w", "name": "crm.customers"}],
        "outputs": [
            {
                "namespace": "w",
                "name": _output,
                "facets": {
                    "columnLineage": {
                        "fields": {
                            "email_hash": {
                                "inputFields": [
                                    {"namespace": "w", "name": "crm.customers", "field": "email"}
                                ]
                            }
                        }
                    }
                },
            }
        ],
    }
    for path, value in changes.items():
        *parents, last = path.split(".")
        target = event
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is _DROP:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return event


_DROP = object()


class JsonText(str):
    """An event given as its JSON text (one too deep to build as a Python value)."""


def _json(payload: Any) -> str:
    return payload if isinstance(payload, JsonText) else json.dumps(payload)


def openlineage_cases() -> list[Case]:
    """RunEvents breaking the OpenLineage schema (2-0-2) or the store's bounds: one posted
    alone (400), and the same one posted between two good events (201, only it refused)."""
    cases: list[Case] = []
    c = CANARY

    def add(family: str, name: str, event: Any, fragment: str) -> None:
        cases.append(Case("openlineage", family, name, event, 400, fragment, store=True))

    required = ("eventTime", "run", "run.runId", "job", "job.namespace", "job.name")
    for path in required:
        add("missing field", path, _event(str(uuid.uuid4()), **{path: _DROP}), "Field required")
    wrong = {"a number": 7, "a list": [c], "an object": {c: c}, "true": True, "null": None}
    for path in (
        "eventTime",
        "run",
        "run.runId",
        "job",
        "job.name",
        "inputs",
        "outputs.0",
        "outputs.0.name",
        "run.facets",
        "outputs.0.facets",
    ):
        for label, value in wrong.items():
            if path in ("inputs", "run.facets", "outputs.0.facets") and label in ("null",):
                continue  # null is the spec's "none": accepted
            if path in ("inputs",) and label == "a list":
                continue  # a list is an inputs list: its element is checked below
            if path in ("run.facets", "outputs.0.facets") and label == "an object":
                continue  # facets are objects
            add(
                "wrong type",
                f"{path} {label}",
                _event(str(uuid.uuid4()), **{path: value}),
                "eventTime must be text"
                if path == "eventTime" and label == "a number"
                else "malformed OpenLineage RunEvent",
            )
    for value in (c, "", "FINISHED", "COMPLETE ", 1, ["START"]):
        add(
            "eventType",
            repr(value).replace(c, "…"),
            _event(str(uuid.uuid4()), eventType=value),
            "eventType",
        )
    for name, when in (
        ("not ISO 8601", f"yesterday {c}"),
        ("no zone", "2026-11-01T02:00:00"),
        ("date only", "2026-11-01"),
        ("month 13", "2026-13-01T00:00:00Z"),
        ("year 9999", "9999-12-31T23:59:59Z"),
        ("year 1", "0001-01-01T00:00:00Z"),
        ("1969", "1969-12-31T23:59:59+00:00"),
        ("a number", 1762000000),
    ):
        fragment = {
            "year 9999": "more than a day ahead",
            "year 1": "before 1970-01-01",
            "1969": "before 1970-01-01",
            "a number": "must be text in ISO 8601",
        }.get(name, "eventTime")
        add("eventTime", name, _event(str(uuid.uuid4()), eventTime=when), fragment)
    for name, run_id, fragment in (
        ("blank", "   ", "must not be blank"),
        ("empty", "", "must not be blank"),
        ("256 characters", c + "0" * 256, "run.runId is longer than 255"),
        ("NUL", f"{c}\x00", "holds a control character"),
        ("line break", f"{uuid.uuid4()}\n{c}", "holds a control character"),
    ):
        add("runId", name, _event(run_id), fragment)
    for name, output, fragment in (
        ("NUL", f"marts.{c}\x00", "outputs[0].name holds a control character"),
        ("escape sequence", f"marts.{c}\x1b[2J", "outputs[0].name holds a control character"),
        ("2,000 characters", f"marts.{c}" + "x" * 2000, "outputs[0].name is longer than 1024"),
        ("blank", " ", "must not be blank"),
    ):
        add("dataset name", name, _event(str(uuid.uuid4()), output), fragment)
    long_column = {
        "fields": {
            c + "x" * 600: {
                "inputFields": [{"namespace": "w", "name": "crm.customers", "field": "email"}]
            }
        }
    }
    long_input = {
        "fields": {
            "h": {
                "inputFields": [{"namespace": "w", "name": "crm.customers", "field": c + "y" * 600}]
            }
        }
    }
    for name, facet, fragment in (
        ("column 600 characters", long_column, "a column name is longer than 512"),
        ("input column 600 characters", long_input, "an input column name is longer than 512"),
    ):
        add(
            "column lineage",
            name,
            _event(str(uuid.uuid4()), **{"outputs.0.facets": {"columnLineage": facet}}),
            fragment,
        )
    for depth in (65, 200, 3000):
        add(
            "nesting",
            f"a facet {depth} deep",
            JsonText(
                json.dumps(_event(str(uuid.uuid4()), **{"outputs.0.facets": {c: "DEEP"}})).replace(
                    '"DEEP"', "[" * depth + "]" * depth
                )
            ),
            "more than 64 levels deep",
        )
    for name, value in (("a number", 5), ("a string", c), ("null", None), ("a list", [c])):
        add("not an object", name, value, "must be a JSON object")
    return cases


def _http(name: str, family: str, code: int, fragment: str, **request: Any) -> Case:
    # Every request carries the canary in a header too: no answer may repeat it.
    request["headers"] = {"X-Correlation-Id": CANARY, **request.get("headers", {})}
    return Case("http", family, name, request, code, fragment, store=True)


def http_cases() -> list[Case]:
    """Bodies and headers of POST /api/v1/lineage (the ingest cap is BODY_CAP here)."""
    c = CANARY
    good = json.dumps(_event(str(uuid.uuid4()))).encode()
    cases = []
    # Not JSON: cut a good event short at every tenth of its length, and the usual mistakes.
    for tenth in range(1, 10):
        cut = good[: len(good) * tenth // 10]
        cases.append(
            _http(f"cut at {tenth}/10", "bad JSON", 400, "not valid JSON", content=cut + c.encode())
        )
    for name, body in (
        ("single quotes", f"{{'eventType': '{c}'}}".encode()),
        ("trailing garbage", good + b" " + c.encode()),
        ("comment", b"// " + c.encode() + b"\n" + good),
        ("NaN bare word", f'{{"eventTime": {c}}}'.encode()),
        ("empty", b""),
        ("whitespace", b" \n\t "),
        ("UTF-16", json.dumps({"eventType": c}).encode("utf-16")),
        ("latin-1 in a string", f'{{"eventType": "{c}\xe9"}}'.encode("latin-1")),
        ("NUL in a string", f'{{"eventType": "{c}\x00"}}'.encode()),
    ):
        fragment = (
            "not UTF-8 text" if name in ("UTF-16", "latin-1 in a string") else ("not valid JSON")
        )
        cases.append(_http(name, "bad JSON", 400, fragment, content=body))
    # Nesting: a 3,000-deep array is refused naming the limit, before anything recurses.
    for depth in (100, 3000, 100_000):
        cases.append(
            _http(
                f"array {depth} deep",
                "nesting",
                400,
                "more than 64 levels deep",
                content=b"[" * depth + f'"{c}"'.encode() + b"]" * depth,
            )
        )
        cases.append(
            _http(
                f"object {depth} deep",
                "nesting",
                400,
                "more than 64 levels deep",
                content=b'{"a":' * depth + f'"{c}"'.encode() + b"}" * depth,
            )
        )
    # Size: declared, chunked (no Content-Length) and decompressed, each past the cap.
    big = b'{"x": "' + c.encode() * (BODY_CAP // len(c) + 10) + b'"}'
    cases.append(
        _http(
            "declared past the cap",
            "size",
            413,
            "may be at most",
            content=good,
            headers={"Content-Length": str(BODY_CAP + 1)},
        )
    )
    cases.append(
        _http(
            "chunked past the cap",
            "size",
            413,
            "may be at most",
            chunks=[big[i : i + 65536] for i in range(0, len(big), 65536)],
        )
    )
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    packed = bomb.compress(b"[" + b" " * (256 * BODY_CAP)) + bomb.flush()
    cases.append(
        _http(
            "gzip bomb (256x the cap)",
            "compression",
            413,
            "may be at most",
            content=packed,
            headers={"Content-Encoding": "gzip"},
        )
    )
    cases.append(
        _http(
            "gzip bomb, chunked",
            "compression",
            413,
            "may be at most",
            chunks=[packed[i : i + 4096] for i in range(0, len(packed), 4096)],
            headers={"Content-Encoding": "gzip"},
        )
    )
    cases.append(
        _http(
            "gzip cut short",
            "compression",
            400,
            "not valid gzip data",
            content=gzip.compress(good)[:-12],
            headers={"Content-Encoding": "gzip"},
        )
    )
    cases.append(
        _http(
            "not gzip",
            "compression",
            400,
            "not valid gzip data",
            content=c.encode() * 10,
            headers={"Content-Encoding": "gzip"},
        )
    )
    cases.append(
        _http(
            "not deflate",
            "compression",
            400,
            "not valid deflate data",
            content=c.encode() * 10,
            headers={"Content-Encoding": "deflate"},
        )
    )
    for encoding in ("br", "compress", "zstd", f"x-{c}"):
        cases.append(
            _http(
                f"Content-Encoding {encoding.replace(c, '…')}",
                "compression",
                415,
                "Content-Encoding is not supported",
                content=good,
                headers={"Content-Encoding": encoding},
            )
        )
    # Headers: only JSON is taken (what also keeps a form on another site out), whatever the
    # body; a JSON type with a wrong charset is read and refused by the body; huge values.
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        f"application/{c}",
    ):
        cases.append(
            _http(
                f"Content-Type {content_type.replace(c, '…')}",
                "headers",
                415,
                "send the body as JSON",
                content=f"eventType={c}".encode(),
                headers={"Content-Type": content_type},
            )
        )
    cases.append(
        _http(
            "Content-Type application/json; charset=latin-1",
            "headers",
            400,
            "not valid JSON",
            content=f"eventType={c}".encode(),
            headers={"Content-Type": "application/json; charset=latin-1"},
        )
    )
    cases.append(
        _http(
            "a 100 KB header",
            "headers",
            400,
            "not valid JSON",
            content=c.encode(),
            headers={"X-Trace": c * (100_000 // len(c))},
        )
    )
    return cases


def query_cases() -> list[Case]:
    """Query strings: ignored by ingest (the body decides), and behind authentication on
    every read route (401 before any parameter is read back)."""
    c = CANARY
    cases = []
    for query in (f"since={c}", f"status={c}", f"format={c}", "%ff%fe=%00", f"a={c}" * 2000):
        cases.append(
            _http(
                f"ingest ?{query[:20].replace(c, '…')}",
                "query string",
                400,
                "not valid JSON",
                content=c.encode(),
                query=query,
            )
        )
    for path in (
        "/api/v1/records",
        "/api/v1/requests",
        f"/api/v1/records/{c}",
        f"/api/v1/records/{c}/export",
        f"/api/v1/requests/{c}@x.org",
    ):
        for query in (f"since={c}", f"status={c}&format={c}"):
            cases.append(
                _http(
                    f"GET {path.replace(c, '…')}?{query.split('=')[0]}",
                    "query string",
                    401,
                    "Not authenticated",
                    method="GET",
                    path=path,
                    query=query,
                    anonymous=True,
                )
            )
    return cases


def cli_cases() -> list[Case]:
    """Arguments of the `erasure` command: refused by argparse or the command, exit 2."""
    c = CANARY
    cases = []

    def add(family: str, name: str, argv: list[str], fragment: str) -> None:
        cases.append(Case("cli", family, name, argv, 2, fragment))

    counts = {
        "--max-nodes": (["plan", "--catalog", f"{c}.yaml", "--subject", "email=-"], 1),
        "--max-depth": (["lineage", "closure", "--catalog", f"{c}.yaml", "--from", "t"], 0),
        "--workers": (["lineage", "ingest", f"{c}.jsonl"], 0),
        "--retention-days": (["lineage", "purge"], 1),
    }
    for option, (command, least) in counts.items():
        bad = ["-1", "1.5", "1e3", "0x10", "\u0661\u0662", " 7", "", "9" * 400, c]
        if least:
            bad.append("0")
        for value in bad:
            add(
                "counts",
                f"{option} {value[:12].replace(c, '…')!r}",
                [*command, f"{option}={value}"],
                f"{option}: must be a whole number from {least}",
            )
    for value in (c, "2026-13-01", "", "2026-11-01T25:00", "9" * 50):
        add(
            "times",
            f"--at {value[:12].replace(c, '…')!r}",
            ["lineage", "closure", "--catalog", f"{c}.yaml", "--from", "t", f"--at={value}"],
            "--at: must be an ISO 8601 time",
        )
    for value in (c, f"={c}", f"{c}@example.org"):
        add(
            "subjects",
            f"--subject {value.replace(c, '…')}",
            ["plan", "--catalog", "{catalog}", "--subject", value],
            "--subject must be TYPE=VALUE",
        )
    add("words", "unknown command", [c], "invalid choice")
    add("words", "unknown subcommand", ["lineage", c], "invalid choice")
    add(
        "words",
        "stray argument",
        ["lineage", "sql", "-", f"{c}@example.org"],
        "unrecognized arguments",
    )
    add("words", "unknown option", ["lineage", "status", f"--{c}"], "unrecognized arguments")
    add(
        "words",
        "dialect",
        ["lineage", "sql", "--dialect", f"{c}@x", "/dev/null"],
        "unknown SQL dialect (as given)",
    )
    add(
        "words",
        "closure root",
        ["lineage", "closure", "--catalog", "{catalog}", "--from", f"{c}@example.org"],
        "dataset with that name is not",
    )
    add(
        "words",
        "confirm-deletion reference",
        ["requests", "confirm-deletion", f"{c}@example.org", f"../{c}", "--by", c, "--note", c],
        "no erasure request with that reference is registered",
    )
    add(
        "words",
        "audit reference",
        ["audit", "show", f"{c}@example.org"],
        "no completion records for a request with that reference",
    )
    return cases


CASES = [
    *catalog_cases(),
    *identifier_cases(),
    *sql_cases(),
    *openlineage_cases(),
    *http_cases(),
    *query_cases(),
    *cli_cases(),
]
IDENTIFIER_DOORS = ("the desk", "erasure plan")  # a typed identifier is checked at both


def _backends(case: Case) -> tuple[str, ...]:
    if case.store:
        return BACKENDS
    return IDENTIFIER_DOORS if case.door == "identifier" else ("-",)


PLAYS = [(case, backend) for case in CASES for backend in _backends(case)]


# ---------------------------------------------------------------------------------------------
# Playing a case through its door


@dataclass
class Doors:
    base: Path
    apps: dict[str, Any]  # backend -> TestClient of the erasure app
    stores: dict[str, Any]  # backend -> Store


def _bounded(play: Callable[[], tuple[int, str, int]], outcome: Outcome) -> None:
    """Run `play` in a thread for at most BOUND_SECONDS; a traceback is an outcome."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = play()
        except BaseException:
            result["traceback"] = traceback.format_exc()

    started = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND_SECONDS)
    outcome.seconds = time.perf_counter() - started
    if thread.is_alive():
        outcome.hung = True
    elif "traceback" in result:
        outcome.traceback, outcome.text = True, result["traceback"]
    else:
        outcome.code, outcome.text, outcome.neighbours_lost = result["value"]


def _cli(argv: list[str], cwd: Path, stdin_text: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    stdin = io.StringIO(stdin_text)
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        _stdin(stdin),
        contextlib.chdir(cwd),
    ):
        try:
            code = main(argv)
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def _stdin(replacement: io.StringIO) -> Iterator[None]:
    import sys

    saved, sys.stdin = sys.stdin, replacement
    try:
        yield
    finally:
        sys.stdin = saved


def play_catalog(doors: Doors, case: Case) -> tuple[int, str, int]:
    path = doors.base / "catalogs" / f"{uuid.uuid4().hex}.yaml"
    path.write_bytes(case.payload if isinstance(case.payload, bytes) else case.payload.encode())
    store = f"sqlite:///{doors.base}/cli-store.db"
    # `erasure plan` reads the catalog, then opens the warehouse it names.
    argv = ["plan", "--catalog", str(path), "--subject", "email=-", "--store", store]
    code, _, err = _cli(argv, doors.base, stdin_text="someone@example.org\n")
    return code, err.replace(str(path), "<catalog>"), 0


def play_identifier(doors: Doors, case: Case, backend: str) -> tuple[int, str, int]:
    """The desk's checks (erasure_airflow.api.desk): the form, then the identifier's type;
    or `erasure plan --subject TYPE=-` with the value on stdin, as its help advises."""
    id_type, value = case.payload
    estate = doors.base / "estate"
    if backend == "erasure plan":
        argv = ["plan", "--catalog", str(estate / "catalog.yaml"), "--subject", f"{id_type}=-",
                "--store", f"sqlite:///{doors.base}/cli-store.db"]  # fmt: skip
        code, _, err = _cli(argv, doors.base, stdin_text=value + "\n")
        return code, err, 0
    catalog = load_catalog(estate / "catalog.yaml")
    try:
        request = ErasureRequest.parse(
            {
                "request_ref": "REQ-hostile-1",
                "identifier_type": id_type,
                "identifier": value,
                "received_on": "2026-11-01",
                "legal_ground": "art17_1_a",
            }
        )
        refuse_misfit(
            catalog.identifiers, request.identifier_type, request.identifier.get_secret_value()
        )
    except ErasureError as exc:
        return 422, str(exc), 0
    return 201, "accepted", 0


def play_sql(doors: Doors, case: Case) -> tuple[int, str, int]:
    """The planner's lineage over a catalog naming the file, and `erasure lineage sql FILE`."""
    estate = doors.base / "estate"
    hostile = estate / "sql" / "reports.hostile.sql"
    hostile.write_bytes(case.payload)
    catalog = load_catalog(estate / "catalog.yaml")
    warehouse = Warehouse(catalog)
    try:
        lineage = build_lineage(catalog, warehouse)
    finally:
        warehouse.dispose()
    gaps = [g for g in lineage.gaps if g.kind is GapKind.UNPARSEABLE_SQL]
    text = " | ".join(g.detail for g in gaps if g.dataset and g.dataset.name == "reports.hostile")
    others = [g for g in gaps if g.dataset is None or g.dataset.name != "reports.hostile"]
    good = {e.target.dataset.name for e in lineage.graph.edges()}
    lost = int("reports.good" not in good) + len(others)
    cli_text = ""
    if case.family in ("nesting", "syntax"):  # `erasure lineage sql` gives the same gap
        code, out, err = _cli(["lineage", "sql", str(hostile)], doors.base)
        gaps = json.loads(out)["gaps"] if code == 0 else []
        cli_text = " ".join(gaps) or err
        if code != 0 or case.fragment not in cli_text:
            return code or 1, f"erasure lineage sql: exit {code}: {cli_text}", lost
    elif case.family == "encoding" and "NUL" not in case.name:  # ...or says it is not UTF-8
        code, _, cli_text = _cli(["lineage", "sql", str(hostile)], doors.base)
        if code != 2 or "not UTF-8 text" not in cli_text:
            return code or 1, f"erasure lineage sql: exit {code}: {cli_text}", lost
    return 0, f"{text} || erasure lineage sql: {cli_text}", lost


def play_openlineage(doors: Doors, case: Case, backend: str) -> tuple[int, str, int]:
    """Posted alone (its answer), then between two good events (only it refused)."""
    app = doors.apps[backend]
    alone = app.post("/api/v1/lineage", content=_json(case.payload), headers=_key())
    good = [_event(str(uuid.uuid4()), f"marts.n{n}") for n in range(2)]
    texts = [json.dumps(good[0]), _json(case.payload), json.dumps(good[1])]
    batch = app.post("/api/v1/lineage", content="[" + ", ".join(texts) + "]", headers=_key())
    lost = 0
    results = batch.json().get("results", []) if batch.status_code in (200, 201) else []
    if len(results) != 3 or "error" not in results[1] or results[1].get("index") != 1:
        lost += 1
    stored = _stored_runs(doors.stores[backend])
    lost += sum(e["run"]["runId"] not in stored for e in good)
    text = alone.text + " || " + batch.text
    return alone.status_code, text, lost


def play_http(doors: Doors, case: Case, backend: str) -> tuple[int, str, int]:
    request = dict(case.payload)
    app = doors.apps[backend]
    headers = {} if request.pop("anonymous", False) else _key()
    headers.update(request.pop("headers", {}))
    path = request.pop("path", "/api/v1/lineage")
    if "query" in request:
        path += "?" + request.pop("query")
    method = request.pop("method", "POST")
    if "chunks" in request:
        chunks = request.pop("chunks")
        request["content"] = iter(chunks)  # sent chunked: no Content-Length
    response = app.request(method, path, headers=headers, **request)
    return response.status_code, response.text, 0


def play_cli(doors: Doors, case: Case) -> tuple[int, str, int]:
    argv = [
        a.replace("{catalog}", str(doors.base / "estate" / "catalog.yaml")) for a in case.payload
    ]
    code, _, err = _cli(argv, doors.base)
    return code, err, 0


def _key() -> dict[str, str]:
    return {"Authorization": f"Bearer {LINEAGE_KEY}", "Content-Type": "application/json"}


def _stored_runs(store: Any) -> set[str]:
    with store.engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.text("SELECT run_id FROM lineage_events"))}


def play(doors: Doors, case: Case, backend: str) -> Outcome:
    outcome = Outcome(case, backend)
    runner: Callable[[], tuple[int, str, int]]
    if case.door == "catalog":
        runner = lambda: play_catalog(doors, case)  # noqa: E731
    elif case.door == "identifier":
        runner = lambda: play_identifier(doors, case, backend)  # noqa: E731
    elif case.door == "sql":
        runner = lambda: play_sql(doors, case)  # noqa: E731
    elif case.door == "openlineage":
        runner = lambda: play_openlineage(doors, case, backend)  # noqa: E731
    elif case.door == "http":
        runner = lambda: play_http(doors, case, backend)  # noqa: E731
    else:
        runner = lambda: play_cli(doors, case)  # noqa: E731
    _bounded(runner, outcome)
    outcome.judge()
    return outcome


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Doors]:
    """The estate the doors read (a catalog with a good and a hostile lineage SQL file), and
    the erasure app over a SQLite and a Postgres store, ingest capped at BODY_CAP."""
    from fastapi.testclient import TestClient

    from erasure_airflow import api as erasure_api
    from erasure_airflow.api import routes
    from erasure_airflow.api.backend import ErasureBackend

    base = tmp_path_factory.mktemp("bad-inputs")
    (base / "catalogs").mkdir()
    estate = base / "estate"
    (estate / "sql").mkdir(parents=True)
    (estate / "catalog.yaml").write_text(GOOD_CATALOG)
    (estate / "sql" / "reports.good.sql").write_text(
        "SELECT c.id AS id, c.email AS email FROM crm.customers AS c"
    )
    with sa.create_engine(f"sqlite:///{estate / 'wh.crm.db'}").begin() as conn:
        conn.execute(sa.text("CREATE TABLE customers (id TEXT, email TEXT)"))

    schema = f"bad_inputs_{uuid.uuid4().hex[:8]}"
    with sa.create_engine(
        postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
        if postgres_url.startswith("postgresql://")
        else postgres_url
    ).begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    urls = {
        "SQLite": f"sqlite:///{base}/erasure.db",
        "Postgres": f"{postgres_url}?options=-csearch_path%3D{schema}",
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(routes, "MAX_EVENT_BYTES", BODY_CAP)
        apps, clients, stores = {}, [], {}
        for backend, url in urls.items():
            settings = Settings.model_construct(
                store_url=url, lineage_api_key=SecretStr(LINEAGE_KEY)
            )
            erasure = ErasureBackend(settings)
            client = TestClient(erasure_api.create_app(erasure))
            clients.append(client.__enter__())
            apps[backend] = clients[-1]
            stores[backend] = erasure.store()
        try:
            yield Doors(base, apps, stores)
        finally:
            for client in clients:
                client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def outcomes(doors: Doors) -> dict[tuple[str, str], Outcome]:
    """Every case played once through its door, before the first test asks."""
    return {(case.id, backend): play(doors, case, backend) for case, backend in PLAYS}


@pytest.mark.parametrize(("case", "backend"), PLAYS, ids=[f"{c.id}[{b}]" for c, b in PLAYS])
def test_a_hostile_input_is_refused_clearly_quickly_and_without_echo(
    outcomes: dict[tuple[str, str], Outcome], case: Case, backend: str
) -> None:
    outcome = outcomes[(case.id, backend)]
    assert not outcome.problems, (
        f"{case.id} on {backend}: {'; '.join(outcome.problems)} || {outcome.text[:600]}"
    )


def test_the_corpus_is_generated_large_and_across_every_door() -> None:
    doors = {case.door for case in CASES}
    assert doors == {"catalog", "identifier", "sql", "openlineage", "http", "cli"}
    assert len(CASES) >= 150
    carried = [c for c in CASES if CANARY in json.dumps(c.payload, default=_text)]
    assert len(carried) >= 0.8 * len(CASES), "most inputs carry the canary (echo check)"
    assert len({case.id for case in CASES}) == len(CASES), "two cases share a name"


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------------------------------------
# The tally, published beside the fault matrix


def render(results: list[Outcome]) -> str:
    rows = [
        "| door | family | cases | runs | refused clearly | tracebacks | hangs | echoes "
        "| good neighbours lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((o.case.door, o.case.family) for o in results))
    for door, family in keys:
        mine = [o for o in results if (o.case.door, o.case.family) == (door, family)]
        rows.append(
            f"| {DOOR_NAMES[door]} | {family} | {len({o.case.id for o in mine})} | {len(mine)} "
            f"| {sum(o.clear for o in mine)} | {sum(o.traceback or o.code == 500 for o in mine)} "
            f"| {sum(o.hung for o in mine)} "
            f"| {sum('the input was echoed' in o.problems for o in mine)} "
            f"| {sum(o.neighbours_lost for o in mine)} |"
        )
    return SECTION.format(
        cases=len({o.case.id for o in results}),
        runs=len(results),
        clear=sum(o.clear for o in results),
        tracebacks=sum(o.traceback or o.code == 500 for o in results),
        hangs=sum(o.hung for o in results),
        echoes=sum("the input was echoed" in o.problems for o in results),
        lost=sum(o.neighbours_lost for o in results),
        bound=BOUND_SECONDS,
        cap=BODY_CAP // 1024,
        table="\n".join(rows),
    )


DOOR_NAMES = {
    "catalog": "catalog file (`erasure plan --catalog`)",
    "identifier": "typed identifier (the desk's checks; `erasure plan --subject`)",
    "sql": "lineage SQL file (plan + `erasure lineage sql`)",
    "openlineage": "OpenLineage event (`POST /api/v1/lineage`)",
    "http": "ingest body and headers",
    "cli": "`erasure` arguments",
}

SECTION = """\
## Bad inputs: is every hostile input refused clearly?

<!-- Generated by tests/integration/test_bad_inputs.py; do not edit by hand. -->

{cases} hostile inputs, generated from the standards they break (RFC 5322 addresses, E.164
numbers, Unicode's space and control categories and lone surrogates, YAML anchors, the
OpenLineage RunEvent schema, HTTP framing and compression), each with a unique canary
string inside, were played through the door that parses them ({runs} runs: what touches
the erasure store ran on SQLite and on Postgres). Each names the refusal it expects: an
HTTP status or an exit code and a fragment of the message.

**{clear} of {runs} runs were refused clearly**; tracebacks (or 500s): **{tracebacks}**;
hangs (over {bound:.0f} s): **{hangs}**; inputs echoed back: **{echoes}**; good events lost
because a bad event was sent beside them: **{lost}** (every OpenLineage case is also sent
between two good events: the good ones are stored, the bad one is refused by its index).

What is refused, and how:

- **Lineage ingest**: a body nesting arrays or objects more than 64 levels deep is a 400
  naming the limit; a body past the size cap is a 413 whether it declares its length, is
  sent chunked or expands from gzip (the cap is {cap} KiB in this test, 64 MiB in service);
  an event whose `eventTime` is more than a day ahead of the server or before 1970, whose
  names hold control characters, or whose names or columns are longer than the store keeps
  is refused with the field named, alone: its neighbours in a batch are stored.
- **Lineage SQL files**: a file that is not UTF-8, holds a NUL, is larger than 4 MiB or
  nests deeper than the parser follows is an `unparseable_sql` gap on its dataset naming
  the file (the dataset escalates); every other source and plan goes on.
- **Catalog**: YAML aliases may expand to at most 1,000,000 values and may not hold
  themselves; the file is UTF-8; a dataset name is printable, not blank, at most 512
  characters and has no `.`/`..` path segment.
- **Identifiers**: refused where typed, naming the field and the rule, never the value.
- **`erasure`**: counts and times are checked by the argument parser (exit 2) with the
  allowed range; no usage error repeats what was typed.

{table}
"""


def test_the_published_tally_is_the_one_this_run_produced(
    outcomes: dict[tuple[str, str], Outcome],
) -> None:
    results = [outcomes[(case.id, backend)] for case, backend in PLAYS]
    if publish(DOC, "bad-inputs", render(results)):
        pytest.fail(f"{DOC.relative_to(REPO)} was out of date: rewritten; review and commit it")


def test_the_canary_is_a_plain_word() -> None:
    assert set(CANARY) <= set(string.ascii_lowercase + string.digits)
