"""Stored forms generated from the standards' families, each labelled against every target.

Where `data/matching_corpus/` lists the forms earlier issues named one by one, this corpus
derives them systematically, as combinations of the families the standards define:

- Unicode (UAX #15): NFC, NFD, NFKC and NFKD inputs; compatibility forms (fullwidth,
  mathematical alphanumerics, ligatures);
- default-ignorable and format characters (UAX #44, Cf) anywhere in a value: zero-width
  space, joiners, soft hyphen, word joiner, byte-order mark, bidi marks, variation selector;
- full case folding (`ß`, final sigma), the Turkish dotted capital I (`İ`, the plain i upper-
  cased by a Turkish locale) and the dotless i (another letter);
- confusables (UTS #39): Cyrillic and Greek look-alikes of Latin letters, `0`/`o`, `1`/`l`;
- RFC 5322 display forms of addresses (display names, angle brackets, comments, quoted local
  parts, the domain's root dot), IDNA punycode domains, `mailto:`;
- phone numbering (E.164, national forms with trunk prefix, international access prefix 00,
  RFC 3966 `tel:`, extensions `ext.`/`x`/`#`/`;ext=`, separators, digits of other scripts).

Every value carries a label per target: `exact` (must be matched), `near` (must be reported as
a near miss and not matched) or `other` (neither). `test_matching_families.py` holds Python's
decision, SQLite and Postgres (through locate, verify, erase and the near-miss scan) to them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import cycle, product

import phonenumbers as pn
import sqlalchemy as sa
from pydantic import SecretStr

from erasure.catalog import Catalog
from erasure.locate import locate, parked_location
from erasure.matching import Matcher, NearMiss, near_miss_kind
from erasure.model import SubjectRef
from erasure.pseudonym import normalise
from erasure.verify import recount
from erasure.warehouse import Warehouse
from erasure.workflow import make_plan
from tests.unit.actions.support import erase_all
from tests.unit.matching_corpus import (
    CorpusTable,
    IdentifierCorpus,
    Stored,
    check_target,
)
from tests.unit.matching_corpus import Target as CorpusTarget

EXACT, NEAR, OTHER = "exact", "near", "other"

# Default-ignorable and format characters (one of each kind the standards name).
IGNORABLES = {
    "ZWSP": "\u200b",
    "ZWNJ": "\u200c",
    "ZWJ": "\u200d",
    "SHY": "\u00ad",
    "WJ": "\u2060",
    "BOM": "\ufeff",
    "LRM": "\u200e",
    "RLM": "\u200f",
    "VS16": "\ufe0f",
    "ALM": "\u061c",
}
# Whitespace a keyboard or an export leaves around a value.
EDGES = {"none": ("", ""), "NBSP": ("\u00a0", ""), "tab": ("\t", "\n"), "IDSP": ("", "\u3000")}
FORMS = ("NFC", "NFD", "NFKC", "NFKD")
# Latin letter -> a look-alike of another script (UTS #39 confusables).
CONFUSABLE = {
    "a": "\u0430",  # CYRILLIC SMALL LETTER A
    "e": "\u0435",  # CYRILLIC SMALL LETTER IE
    "o": "\u03bf",  # GREEK SMALL LETTER OMICRON
    "p": "\u0440",  # CYRILLIC SMALL LETTER ER
    "c": "\u0441",  # CYRILLIC SMALL LETTER ES
    "i": "\u0456",  # CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I
    "x": "\u0445",  # CYRILLIC SMALL LETTER HA
    "C": "\u0421",  # CYRILLIC CAPITAL LETTER ES
    "A": "\u0391",  # GREEK CAPITAL LETTER ALPHA
    "0": "O",  # digit zero as letter O
    "1": "l",  # digit one as small L
    "l": "1",
}
# The label separators of IDNA (RFC 3490 3.1) besides `.`.
IDNA_FULL_STOPS = {
    "\u3002": "IDEOGRAPHIC FULL STOP",
    "\uff0e": "FULLWIDTH FULL STOP",
    "\uff61": "HALFWIDTH IDEOGRAPHIC FULL STOP",
}
DIGIT_ZEROS = {
    "ascii": "0",
    "fullwidth": "\uff10",
    "arabic-indic": "\u0660",
    "persian": "\u06f0",
    "devanagari": "\u0966",
    "bengali": "\u09e6",
}


@dataclass(frozen=True)
class Target:
    name: str
    request: str  # as the DPO types it


@dataclass(frozen=True)
class Form:
    """One stored value and its label against each target (absent: `other`)."""

    value: str
    labels: dict[str, str]
    why: str

    def label(self, target: str) -> str:
        return self.labels.get(target, OTHER)


@dataclass
class Family:
    """The corpus of one identifier type."""

    id_type: str
    normalise: str
    default_region: str | None
    targets: list[Target]
    forms: list[Form] = field(default_factory=list)

    def add(self, value: str, why: str, **labels: str) -> None:
        self.forms.append(Form(value, labels, why))

    def canonical(self, target: Target) -> str:
        return normalise(self.normalise, target.request, default_region=self.default_region)


def _insert(text: str, ch: str, where: int) -> str:
    """`ch` inserted at a position spread over the value (0: start, 1: inside, 2: end)."""
    at = (0, max(1, len(text) // 2), len(text))[where % 3]
    return text[:at] + ch + text[at:]


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _math_bold(text: str) -> str:
    out = []
    for c in text:
        if "A" <= c <= "Z":
            out.append(chr(0x1D400 + ord(c) - ord("A")))
        elif "a" <= c <= "z":
            out.append(chr(0x1D41A + ord(c) - ord("a")))
        elif "0" <= c <= "9":
            out.append(chr(0x1D7CE + ord(c) - ord("0")))
        else:
            out.append(c)
    return "".join(out)


def _edited(text: str) -> Iterator[tuple[str, str]]:
    """Values one edit away: a character dropped, doubled, replaced."""
    letters = [i for i, c in enumerate(text) if c.isalnum()]
    i = letters[len(letters) // 3]
    yield text[:i] + text[i + 1 :], "one character dropped"
    yield text[:i] + text[i] + text[i:], "one character doubled"
    j = letters[-2]
    other = "7" if text[j].isdigit() and text[j] != "7" else ("q" if text[j] != "q" else "z")
    yield text[:j] + other + text[j + 1 :], "one character replaced"


# ---------------------------------------------------------------------------------------------
# Email


def email_family() -> Family:
    targets = [
        Target("alice", "alice.martin@example.com"),
        Target("zoe", "Zoë.Straße@bücher.example"),
        Target("ilknur", "ilknur.yilmaz@example.com.tr"),
    ]
    fam = Family("email", "email", None, targets)
    others = ["bob.jones@example.com", "carol.white@example.org", "zoe.smith@other.example"]
    for t in targets:
        local, _, domain = t.request.partition("@")
        wrappers = [
            ("{a}", "plain"),
            ("<{a}>", "angle brackets"),
            ('"{n}" <{a}>', "quoted display name"),
            ("{n} <{a}>", "display name"),
            ("{a} ({n})", "comment after"),
            ("mailto:{a}", "mailto URI"),
            ('"{l}"@{d}', "quoted local part"),
            ("{l}@{d}.", "root dot of the domain"),
            ("{l} @ {d}", "folding white space around @"),
        ]
        if not domain.isascii():
            puny = ".".join(
                "xn--" + label.encode("punycode").decode() if not label.isascii() else label
                for label in domain.split(".")
            )
            wrappers.append(("{l}@" + puny, "punycode domain"))
        cases = [(str, "as typed"), (str.upper, "upper case"), (str.title, "title case")]
        ignorables = cycle(IGNORABLES.items())
        edges = cycle(EDGES.items())
        for (wrap, wrap_why), (case, case_why), form in product(wrappers, cases, FORMS):
            ign_name, ign = next(ignorables)
            edge_name, (before, after) = next(edges)
            cased_local = case(local)
            cased_domain = case(domain) if "xn--" not in wrap else domain
            address = f"{cased_local}@{cased_domain}"
            value = wrap.format(a=address, n="Mx Person", l=cased_local, d=cased_domain)
            value = unicodedata.normalize(form, value)
            value = before + _insert(value, ign, len(fam.forms)) + after
            fam.add(
                value,
                f"{wrap_why}, {case_why}, {form}, {ign_name}, edges {edge_name}",
                **{t.name: EXACT},
            )
        fam.add(_fullwidth(t.request), "fullwidth (keyboard IME)", **{t.name: EXACT})
        for stop, stop_name in IDNA_FULL_STOPS.items():
            fam.add(
                f"{local}@{domain.replace('.', stop)}",
                f"{stop_name} in the domain",
                **{t.name: EXACT},
            )
            fam.add(
                f"<{local.upper()}@{domain.upper().replace('.', stop)}{stop}>",
                f"{stop_name} in the domain and as its root, upper, in brackets",
                **{t.name: EXACT},
            )
        fam.add(_math_bold(t.request), "mathematical bold (NFKC)", **{t.name: EXACT})
        # Near: each family, also combined with exact-preserving changes.
        for k, (latin, look) in enumerate(
            (ch, CONFUSABLE[ch]) for ch in dict.fromkeys(local.lower()) if ch in CONFUSABLE
        ):
            spoof = local.lower().replace(latin, look, 1) + "@" + domain
            fam.add(spoof, f"confusable {latin!r} in the local part", **{t.name: NEAR})
            fam.add(
                unicodedata.normalize("NFD", spoof.upper()),
                "confusable, upper, NFD",
                **{t.name: NEAR},
            )
            if k >= 3:
                break
        if "i" in local:
            fam.add(local.replace("i", "\u0131") + "@" + domain, "dotless i", **{t.name: NEAR})
            fam.add(
                local.upper().replace("I", "\u0130") + "@" + domain,
                "dotted capital I (Turkish upper case of i)",
                **{t.name: EXACT},
            )
            fam.add(
                local.replace("i", "i\u0307") + "@" + domain,
                "i + COMBINING DOT ABOVE (what the dotted capital I case-folds to)",
                **{t.name: EXACT},
            )
        fam.add(f"{local}+news@{domain}", "subaddress", **{t.name: NEAR})
        fam.add(
            f"<{local.upper()}+shop@{domain}>", "subaddress in brackets, upper", **{t.name: NEAR}
        )
        fam.add(f"{local}@other-mail.example", "same local part, other domain", **{t.name: NEAR})
        fam.add(f"{local}@gmail.com", "same local part at a webmail", **{t.name: NEAR})
        bare = "".join(
            c for c in unicodedata.normalize("NFD", t.request) if not unicodedata.combining(c)
        )
        if bare != t.request:
            fam.add(bare, "accents dropped", **{t.name: NEAR})
        for edited, why in _edited(fam.canonical(t)):
            fam.add(edited, why, **{t.name: NEAR})
            fam.add(f"<{edited.upper()}>", f"{why}, in brackets, upper", **{t.name: NEAR})
        fam.add(f"{local}(at){domain}", "obfuscated (at)", **{t.name: NEAR})
        fam.add(f"{local} at {domain.replace('.', ' dot ')}", "obfuscated at/dot", **{t.name: NEAR})
        fam.add(f"{t.request}, {others[0]}", "two addresses in one field", **{t.name: NEAR})
        fam.add(f"{t.request}; {others[1]}", "two addresses, semicolon", **{t.name: NEAR})
    for other in others:
        for case in (str, str.upper):
            fam.add(case(other), "another person")
            fam.add(f'"Someone" <{case(other)}>', "another person, display form")
    fam.add("not an address", "no @")
    fam.add("info@example.com", "a shared mailbox of the same domain")
    return fam


# ---------------------------------------------------------------------------------------------
# Phone

_EXT_STYLES = (" ext. {}", " x{}", " #{}", ";ext={}", " ext {}", " extension {}", " x {}")


def _digits(text: str, script: str) -> str:
    zero = ord(DIGIT_ZEROS[script])
    return "".join(chr(zero + int(c)) if c.isdigit() and c.isascii() else c for c in text)


def _phone_forms(number: str, region: str) -> list[tuple[str, str]]:
    """Formats of a number (without extension): E.164, international, national, RFC 3966,
    00 for +, (0) after the country code, separators."""
    n = pn.parse(number)
    intl = pn.format_number(n, pn.PhoneNumberFormat.INTERNATIONAL)
    national = pn.format_number(n, pn.PhoneNumberFormat.NATIONAL)
    e164 = pn.format_number(n, pn.PhoneNumberFormat.E164)
    nsn = pn.national_significant_number(n)
    cc = str(n.country_code)
    forms = [
        (e164, "E.164"),
        (intl, "international"),
        (intl.replace(" ", "-"), "international, dashes"),
        (intl.replace(" ", "."), "international, dots"),
        (intl.replace(" ", "\u00a0"), "international, NBSP"),
        ("00" + intl[1:], "00 for +"),
        (f"+{cc} (0){nsn}", "(0) after the country code"),
        (pn.format_number(n, pn.PhoneNumberFormat.RFC3966), "tel: URI"),
        (f"Tel: {intl}", "annotation before"),
        (f"{intl} (home)", "annotation after"),
    ]
    if pn.region_code_for_number(n) == region:
        forms += [
            (national, "national with trunk prefix"),
            (national.replace(" ", ""), "national, no spaces"),
            (national.replace(" ", "/"), "national, slashes"),
            (national.replace(" ", "\u2013"), "national, EN DASH"),
        ]
    return forms


def phone_family() -> Family:
    targets = [
        Target("london", "+44 20 7946 0958"),
        Target("desk99", "+44 20 7946 0958 ext. 99"),
        Target("berlin", "+49 30 901820"),
    ]
    fam = Family("phone", "e164", "GB", targets)
    scripts = cycle(DIGIT_ZEROS)
    ignorables = cycle(IGNORABLES.items())
    # The switchboard and one extension behind it: each is near the other, never the other.
    siblings = {"london": "desk99", "desk99": "london"}
    for t in targets:
        number, _, ext = t.request.partition(" ext. ")
        sibling = siblings.get(t.name)
        for text, why in _phone_forms(number, "GB"):
            for variant in range(5):
                script = next(scripts)
                ign_name, ign = next(ignorables)
                value = _insert(_digits(text, script), ign, variant)
                if ext:
                    for style in _EXT_STYLES[variant::3]:
                        stored = value + style.format(_digits(ext, script))
                        fam.add(
                            stored,
                            f"{why}, {script} digits, {ign_name}, ext {style.strip()!r}",
                            desk99=EXACT,
                            london=NEAR,
                        )
                    other_ext = value + _EXT_STYLES[variant].format("98")
                    fam.add(
                        other_ext, f"{why}, extension 98: a colleague", desk99=NEAR, london=NEAR
                    )
                else:
                    labels = {t.name: EXACT, **({sibling: NEAR} if sibling else {})}
                    fam.add(value, f"{why}, {script} digits, {ign_name}", **labels)
                    if t.name == "berlin":
                        fam.add(
                            value + _EXT_STYLES[variant].format("12"),
                            f"{why}, with an extension",
                            berlin=NEAR,
                        )
        canonical = fam.canonical(t)
        for edited, why in _edited(canonical):
            labels = {t.name: NEAR}
            if sibling and edited.partition(";ext=")[0] == canonical.partition(";ext=")[0]:
                labels[sibling] = NEAR  # the edit hit the extension: the same number
            elif sibling and "doubled" in why:
                labels[sibling] = NEAR  # unparseable: its digits, read without extension
            fam.add(edited, why, **labels)
        if not ext:
            labels = {t.name: NEAR, **({sibling: NEAR} if sibling else {})}
            fam.add(f"{number} / +44 20 7946 0000", "two numbers in one field", **labels)
    for other in ("+44 20 7946 0000", "+44 7700 900123", "+1 212 555 0123", "+49 89 1234567"):
        for text, why in _phone_forms(other, "GB")[:4]:
            fam.add(text, f"another number, {why}")
    fam.add("n/a", "no number")
    return fam


# ---------------------------------------------------------------------------------------------
# Customer id (strip: case kept)


def customer_id_family() -> Family:
    targets = [Target("c0001", "C0001"), Target("ab7731", "AB-7731-X"), Target("id42", "ID-4242")]
    fam = Family("customer_id", "strip", None, targets)
    compat = [
        (str, "as typed"),
        (_fullwidth, "fullwidth (NFKC)"),
        (_math_bold, "mathematical bold (NFKC)"),
        (lambda s: unicodedata.normalize("NFKD", _fullwidth(s)), "fullwidth, NFKD"),
    ]
    for t in targets:
        for (conv, conv_why), (ign_name, ign), (edge_name, (before, after)) in product(
            compat, IGNORABLES.items(), EDGES.items()
        ):
            value = before + _insert(conv(t.request), ign, len(fam.forms)) + after
            fam.add(value, f"{conv_why}, {ign_name}, edges {edge_name}", **{t.name: EXACT})
        low = t.request.lower()
        fam.add(low, "lower case", **{t.name: NEAR})
        fam.add(_fullwidth(low), "lower case, fullwidth", **{t.name: NEAR})
        fam.add(low.replace("-", ""), "lower case, no separators", **{t.name: NEAR})
        for latin, look in CONFUSABLE.items():
            if latin in t.request:
                fam.add(
                    t.request.replace(latin, look, 1), f"confusable {latin!r}", **{t.name: NEAR}
                )
                fam.add(
                    "\u200b" + t.request.replace(latin, look, 1),
                    f"confusable {latin!r}, ZWSP",
                    **{t.name: NEAR},
                )
        if "I" in t.request:
            fam.add(t.request.replace("I", "\u0130"), "dotted capital I", **{t.name: NEAR})
            fam.add(low.replace("i", "\u0131"), "dotless small i", **{t.name: NEAR})
        for sep in (" ", ".", "_", "/"):
            if "-" in t.request:
                fam.add(t.request.replace("-", sep), f"separator {sep!r}", **{t.name: NEAR})
            else:
                fam.add(
                    t.request[:1] + sep + t.request[1:],
                    f"separator {sep!r} added",
                    **{t.name: NEAR},
                )
        for edited, why in _edited(t.request):
            fam.add(edited, why, **{t.name: NEAR})
        if "00" in t.request:
            unpadded = t.request.replace("000", "")
            fam.add(unpadded, "padding zeros dropped", **{t.name: NEAR})
            fam.add(unpadded.lower(), "padding zeros dropped, lower case", **{t.name: NEAR})
    for other in ("C0107", "C9999", "D4017", "AB-1234-Y", "XY-7731-Q", "ID-9191"):
        fam.add(other, "another customer")
        fam.add(_fullwidth(other), "another customer, fullwidth")
    return fam


def families() -> dict[str, Family]:
    """Every identifier type's generated corpus, by type name."""
    return {f.id_type: f for f in (email_family(), phone_family(), customer_id_family())}


# ---------------------------------------------------------------------------------------------
# Driving it through the code paths locate and verify use


def as_corpus(fam: Family) -> IdentifierCorpus:
    """The family as a conformance corpus: each form is the target it is `exact` for."""
    targets = {
        t.name: CorpusTarget(fam.id_type, t.name, t.request, fam.canonical(t)) for t in fam.targets
    }
    stored = []
    for i, form in enumerate(fam.forms):
        exact = [name for name, label in form.labels.items() if label == EXACT]
        assert len(exact) <= 1, f"{fam.id_type} #{i}: exact for several targets"
        stored.append(Stored(i, form.value, exact[0] if exact else None, form.why, "text"))
    return IdentifierCorpus(fam.id_type, fam.normalise, fam.default_region, targets, tuple(stored))


def python_disagreements(fam: Family) -> list[str]:
    """Every (form, target) where Python's decision is not the label: exact by key equality,
    near by `near_miss_kind`, other by neither."""
    matcher = Matcher(fam.id_type, fam.normalise, fam.default_region)
    out = []
    for t in fam.targets:
        canonical = fam.canonical(t)
        near = near_miss_kind(matcher, canonical)
        for i, form in enumerate(fam.forms):
            if matcher.key(form.value) == canonical:
                got = EXACT
            else:
                got = NEAR if near(form.value) else OTHER
            if got != form.label(t.name):
                out.append(
                    f"{t.name} #{i} {form.value!a} ({form.why}): {got}, not {form.label(t.name)}"
                )
    return out


def check_family_target(
    catalog: Catalog,
    warehouse: Warehouse,
    schema: str,
    fam: Family,
    corpus: IdentifierCorpus,
    target: CorpusTarget,
    tables: list[CorpusTable],
) -> None:
    """Locate, relocate, erase, verify and ingest select exactly the `exact` rows
    (`check_target`); then, the subject's rows gone, locate finds it nowhere and reports
    exactly the `near` rows as near misses, in every table of its type."""
    check_target(catalog, warehouse, schema, corpus, target, tables)
    location = locate(catalog, warehouse, target.subject())
    assert location.located == {}
    assert location.search is not None
    reported: dict[str, int] = {}
    for miss in location.search.near_misses:
        reported[miss.dataset.name] = reported.get(miss.dataset.name, 0) + miss.rows
    near = sum(1 for form in fam.forms if form.label(target.name) == NEAR)
    expected = {f"{schema}.{t.name}": near for t in tables if t.id_type == fam.id_type}
    assert reported == expected, f"{target.id}: near misses {reported}, labelled {expected}"


# ---------------------------------------------------------------------------------------------
# Family 4: columns that store the identifier their own way

STORED_FORMS_CATALOG = """\
version: 1
identifiers: {{customer_id: {{normalise: strip}}}}
connections: {{warehouse: {{url: "{url}"}}}}
datasets:
  - {{namespace: w, name: {s}.customers, connection: warehouse, kind: table,
     holds_subject: {{customer_id: id}}}}
  - namespace: w
    name: {s}.orders
    connection: warehouse
    kind: table
    holds_subject: {{customer_id: [customer_id, legacy_no, ref, shouted]}}
    stored_forms:
      customer_id: {{case: lower}}
      legacy_no: {{drop_prefix: C, integer: true}}
      ref: {{prefix: "CUST-"}}
      shouted: {{case: upper}}
  - {{namespace: w, name: {s}.tickets, connection: warehouse, kind: table,
     holds_subject: {{customer_id: customer}}}}
"""
STORED_FORMS_ROWS = {
    # table: (columns, rows); the subject is C0001, whose rows are marked True.
    "customers": (("id",), [(("C0001",), True), (("c0001",), False), (("C0002",), False)]),
    "orders": (
        ("customer_id", "legacy_no", "ref", "shouted"),
        [
            (("c0001", None, None, None), True),
            (("C0001", None, None, None), True),  # a lower-cased column cannot tell case apart
            ((None, 1, None, None), True),
            ((None, None, "CUST-C0001", None), True),
            ((None, None, "cust-C0001", None), False),  # the prefix is as declared
            ((None, None, None, "C0001"), True),
            ((None, 2, "CUST-C0002", "C0002"), False),
            (("c0002", 10, "C0001", None), False),  # ref without its prefix is not the form
        ],
    ),
    # No stored form: c0001 here is another customer's id to `strip`, shown as a near miss.
    "tickets": (("customer",), [(("C0001",), True), (("c0001",), False)]),
}


def stored_forms_statements(schema: str, integer_type: str = "INTEGER") -> list[str]:
    """CREATE and INSERT statements for the stored-forms estate (values are literals of the
    fixture, none a real person)."""
    out = []
    for table, (columns, rows) in STORED_FORMS_ROWS.items():
        defs = ", ".join(f"{c} {integer_type if c == 'legacy_no' else 'TEXT'}" for c in columns)
        out.append(f"CREATE TABLE {schema}.{table} (n INTEGER PRIMARY KEY, {defs})")
        for n, (values, _) in enumerate(rows):
            literals = ", ".join(
                "NULL" if v is None else str(v) if isinstance(v, int) else f"'{v}'" for v in values
            )
            out.append(
                f"INSERT INTO {schema}.{table} (n, {', '.join(columns)}) VALUES ({n}, {literals})"
            )
    return out


def check_stored_forms(catalog: Catalog, warehouse: Warehouse, schema: str) -> None:
    """Locate finds the subject's rows by each column's declared form, verify recounts them,
    erase removes exactly them; the column without a form reports `c0001` as a near miss."""
    subject = SubjectRef(type="customer_id", value=SecretStr("C0001"))
    expected = {
        f"{schema}.{table}": sum(1 for _, mine in rows if mine)
        for table, (_, rows) in STORED_FORMS_ROWS.items()
    }
    location = locate(catalog, warehouse, subject)
    assert {ref.name: hit.rows for ref, hit in location.located.items()} == expected
    plan = make_plan(catalog, subject, warehouse=warehouse, location=location)
    before = recount(catalog, warehouse, *parked_location(location), plan, check=False)
    assert {r.dataset: r.found for r in before} == expected
    evidence = erase_all(catalog, warehouse, location, plan)
    assert {e.dataset: e.rows_deleted for e in evidence} == expected
    # The columns without a declared form still hold c0001 for C0001: verify names them (a
    # case-changing system may have written it) and does not pass them.
    after = recount(catalog, warehouse, *parked_location(location), plan, check=False)
    assert all(r.found == 0 for r in after)
    assert {r.dataset: r.in_another_case for r in after if not r.ok} == {
        f"{schema}.tickets": 1,
        f"{schema}.customers": 1,
    }
    left = {
        f"{schema}.{table}": sum(1 for _, mine in rows if not mine)
        for table, (_, rows) in STORED_FORMS_ROWS.items()
    }
    for name, rows in left.items():
        ds = catalog.by_name(name)
        table = warehouse.table(ds)
        assert table is not None
        with warehouse.connect(ds) as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == rows
    again = locate(catalog, warehouse, subject)
    assert again.located == {} and again.search is not None
    kinds = {(m.dataset.name, m.column, m.kind): m.rows for m in again.search.near_misses}
    assert kinds[(f"{schema}.tickets", "customer", NearMiss.CASE)] == 1
    assert kinds[(f"{schema}.customers", "id", NearMiss.CASE)] == 1
