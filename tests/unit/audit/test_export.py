"""Evidence packs: self-contained, verifiable offline, escaped, and free of the identifier."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from erasure.audit.closure_graph import ACTION_COLOURS, closure_svg, lineage_depths
from erasure.audit.evidence import ArtefactOutcome
from erasure.audit.export import export_html, export_json, render_html, verify_pack
from erasure.audit.records import RecordError, RecordLedger
from erasure.model import Action
from tests.unit.audit.support import (
    CANARY,
    SUBJECT,
    LocalSigner,
    completion_body,
    received_body,
    record_request,
)

EVIL = '<script>alert("x")</script>&'


@pytest.fixture
def pack(ledger: RecordLedger) -> dict[str, Any]:
    ledger.append("REQ-2026-0041", SUBJECT, "received", received_body())  # another request
    record_request(ledger, "REQ-2026-0042", with_tape=True)
    ledger.append("REQ-2026-0043", SUBJECT, "received", received_body())
    return export_json(ledger, "REQ-2026-0042")


def test_the_json_pack_is_self_contained_and_verifies(pack: dict[str, Any]) -> None:
    records = pack["records"]
    assert isinstance(records, list) and [r["seq"] for r in records] == [2, 3, 4, 5]
    assert {r["request_ref"] for r in records} == {"REQ-2026-0042"}
    assert set(pack["public_keys"]) == {"1"}
    assert pack["public_keys"]["1"]["pem"].startswith("-----BEGIN PUBLIC KEY-----")
    chain = pack["chain"]
    assert [link["seq"] for link in chain["segment"]] == [2, 3, 4, 5]
    assert chain["head"]["seq"] == 6
    assert pack["verify"]["ok"] is True, pack["verify"]
    # Survives a round trip through a file: everything an auditor needs is in the JSON.
    assert verify_pack(json.loads(json.dumps(pack))).ok


def test_the_segment_shows_links_but_no_other_request(pack: dict[str, Any]) -> None:
    text = json.dumps(pack["chain"])
    assert "REQ-2026-0041" not in text and "REQ-2026-0043" not in text
    assert "body" not in text


def test_a_tampered_pack_names_the_record(pack: dict[str, Any]) -> None:
    forged = copy.deepcopy(pack)
    forged["records"][3]["body"]["artefacts"][1]["evidence"]["rows_deleted"] = 2
    report = verify_pack(forged)
    assert not report.ok
    assert report.first_problem == "seq 5: content does not match its record_hash (edited)"


def test_the_pack_is_checked_against_keys_the_auditor_trusts(
    pack: dict[str, Any], signer: LocalSigner
) -> None:
    assert verify_pack(pack, public_keys=signer.public_keys()).ok
    impostor = LocalSigner().public_keys()
    report = verify_pack(pack, public_keys=impostor)
    assert not report.ok and "signature does not verify" in (report.first_problem or "")


def test_no_export_holds_the_identifier(ledger: RecordLedger) -> None:
    record_request(ledger, "REQ-2026-0042", with_tape=True)
    as_json = json.dumps(export_json(ledger, "REQ-2026-0042"), ensure_ascii=False)
    as_html = export_html(ledger, "REQ-2026-0042")
    for text in (as_json, as_html):
        assert CANARY.casefold() not in text.casefold()
        assert SUBJECT in text  # the keyed hash is how the subject appears


def test_exporting_an_unknown_request_says_so(ledger: RecordLedger) -> None:
    with pytest.raises(RecordError, match="no completion records for a request with that") as err:
        export_json(ledger, "REQ-NONE")
    assert "REQ-NONE" not in str(err.value)


# -- HTML -------------------------------------------------------------------------------------


def evil_body() -> dict[str, Any]:
    body = completion_body()
    artefacts = body["artefacts"]
    assert isinstance(artefacts, list)
    artefacts[2]["dataset"] = f"marts.{EVIL}"
    artefacts[3]["upstreams"] = [f"marts.{EVIL}"]
    artefacts[0]["evidence"]["statement"] = "DELETE ... WHERE note = '</td><img src=x onerror=1>'"
    rulings = body["rulings"]
    assert isinstance(rulings, list)
    rulings[0]["justification"] = f"</td></tr></table>{EVIL}"
    return body


def test_html_escapes_everything(ledger: RecordLedger) -> None:
    ledger.append("REQ-2026-0042", SUBJECT, "completed", evil_body(), "complete")
    page = export_html(ledger, "REQ-2026-0042")
    assert "<script" not in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page
    assert "&lt;/td&gt;&lt;img src=x onerror=1&gt;" in page


def test_html_is_self_contained(ledger: RecordLedger) -> None:
    record_request(ledger, "REQ-2026-0042", with_tape=True)
    page = export_html(ledger, "REQ-2026-0042")
    assert page.startswith("<!DOCTYPE html>")
    for external in ("<script", "<link", " src=", "href=", "@import", "url(http"):
        assert external not in page
    # The only URL is the SVG namespace, which is a name, not a fetch.
    assert set(re.findall(r"https?://[^\"' ]+", page)) == {"http://www.w3.org/2000/svg"}
    for heading in ("Closure graph", "Artefacts", "DPO rulings", "Verification", "Records"):
        assert f"<h2>{heading}" in page
    assert "2027-02-27" in page  # the effective erasure date (the tape's retention)
    assert "M. Okafor (DPO)" in page and "retain_exemption" in page


def test_the_artefact_table_is_coloured_by_action(ledger: RecordLedger) -> None:
    record_request(ledger, "REQ-2026-0042")
    page = export_html(ledger, "REQ-2026-0042")
    for action in ("erase_rows", "rebuild", "aggregate_ok", "crypto_shred", "escalate"):
        fill, _ = ACTION_COLOURS[action]
        assert f'<td class="action" style="background:{fill};' in page


def test_the_svg_draws_the_closure_in_lineage_layers() -> None:
    artefacts = [ArtefactOutcome.model_validate(a) for a in completion_body()["artefacts"]]
    assert lineage_depths(artefacts) == {
        "crm.customers": 0,
        "crm.orders": 0,
        "marts.orders_daily": 1,
        "agg.customers_by_region_month": 1,
        "backup.crm_nightly": 1,
        "reports.monthly_revenue": 2,
        "ml.churn_features": 2,
    }
    svg = closure_svg(artefacts)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('<g class="node"') == 7
    assert svg.count('class="edge"') == 6  # every in-closure upstream, once
    assert '<g class="node" data-action="crypto_shred">' in svg
    assert ACTION_COLOURS["escalate"][0] in svg
    # Layer 2 sits to the right of layer 1, which sits to the right of the roots.
    xs = {
        name: int(x)
        for name, x in re.findall(r"<title>([^<:]+): [a-z_]+</title><rect x=\"(\d+)\"", svg)
    }
    assert xs["crm.customers"] < xs["marts.orders_daily"] < xs["reports.monthly_revenue"]


def test_a_feedback_cycle_does_not_hang_the_layout() -> None:
    loop = [
        ArtefactOutcome(dataset="a", action=Action.REBUILD, upstreams=["b"]),
        ArtefactOutcome(dataset="b", action=Action.REBUILD, upstreams=["a"]),
    ]
    assert sorted(lineage_depths(loop).values()) == [0, 1]
    assert closure_svg(loop).count('class="edge"') == 2


def test_a_request_without_completion_renders_its_progress(ledger: RecordLedger) -> None:
    ledger.append("REQ-2026-0042", SUBJECT, "received", received_body())
    page = render_html(export_json(ledger, "REQ-2026-0042"))
    assert "in progress (last: received)" in page
    assert "No artefacts recorded yet." in page
