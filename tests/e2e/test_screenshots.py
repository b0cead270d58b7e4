"""The erasure desk in a real browser: each role logs in and walks the path a person takes.

Headless Chromium (Debian's `chromium`) driven over the Chrome DevTools Protocol
(`websockets`, which Airflow installs): it logs in by setting the UI's `_token` cookie to
the role's JWT, opens pages, clicks, types, and saves the pictures of docs/img/:

- the DPO opens the desk, follows "New erasure request", fills the form and submits it
  (desk-new-request.png); the desk shows the request awaiting her (desk-awaiting.png); she
  follows each prompt's link into Airflow's Required actions and answers it there
  (dpo-prompt.png: the shared household address); the desk shows it complete
  (desk-complete.png);
- the auditor opens the records page, the chain verified (records-page.png), and the
  request's evidence page (evidence-page.png); the desk, the new-request form and
  Airflow's pages of the erasure run refuse her (auditor-refused.png);
- the operator reads the desk but is offered no form; the tasks' account sees nothing.

Chromium comes from apt-get when missing (as root), else the module is skipped saying why.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from websockets.sync.client import ClientConnection, connect

from erasure.catalog import load_catalog
from erasure.sample.seed import DEMO_SUBJECT
from erasure.warehouse import Warehouse
from local.demo.runner import decision_for, load_decisions
from local.up.stack import ERASURE_DAG, REPO, TASKS_USER, Stack
from tests.e2e.conftest import PROMPT_SETTLE_SECONDS, AirflowApi

pytestmark = [
    pytest.mark.integration,
    pytest.mark.airflow,
    pytest.mark.vault,
    pytest.mark.e2e,
]

IMAGES = REPO / "docs" / "img"
WIDTH, HEIGHT = 1400, 1000
PAGE_TIMEOUT_SECONDS = 60.0
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--lang=en-US",  # the date input's field order (month/day/year) is typed below
    f"--window-size={WIDTH},{HEIGHT}",
]
REF = f"DSR-2026-{uuid.uuid4().hex[:4].upper()}"
RUN_ID = f"erasure-{REF}"
NOTES = "Asked by email to be forgotten; confirmed by phone."
PROMPT_HEIGHT = 1080  # the prompt with its option buttons
FORM_HEIGHT = 820  # the new request form down to its button
DESK_HEIGHT = 480  # the desk's cards and a few rows
REFUSED_HEIGHT = 260
SHOWN_PROMPT = "crm.addresses"  # the shared household address: the most telling escalation
RUN_TIMEOUT_SECONDS = 420


class Browser:
    """One headless Chromium with a fresh profile, driven over CDP; stopped by its group."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.process = subprocess.Popen(
            [
                binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its zygote and renderers join the group we stop
        )
        self._ids = itertools.count(1)
        self._exit = contextlib.ExitStack()
        self.ws = self._connect(profile)
        self.call("Page.enable")
        self.call("Network.enable")
        self.viewport(HEIGHT)

    def _connect(self, profile: Path) -> ClientConnection:
        """Attach to the page target; Chromium writes its port to DevToolsActivePort."""
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self.process.returncode}")
            if active.exists() and active.read_text().strip():
                port = int(active.read_text().splitlines()[0])
                targets = httpx.get(f"http://127.0.0.1:{port}/json/list", trust_env=False).json()
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    # No keepalive pings: DevTools does not answer them while a page is idle.
                    return self._exit.enter_context(
                        connect(pages[0]["webSocketDebuggerUrl"], max_size=None, ping_interval=None)
                    )
            time.sleep(0.2)
        raise RuntimeError("chromium did not open its DevTools port within 30 s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events in between are dropped)."""
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=PAGE_TIMEOUT_SECONDS))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def viewport(self, height: int) -> None:
        """Make the page `height` pixels tall (WIDTH wide), so a long form fits one picture."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def log_in(self, base_url: str, token: str) -> None:
        """What Airflow's login leaves behind: the JWT in the `_token` cookie."""
        self.call("Network.setCookie", name="_token", value=token, url=base_url, path="/")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def wait_for_text(self, *needles: str, timeout: float = PAGE_TIMEOUT_SECONDS) -> str:
        """Until the page shows every needle; the page text."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(needle in text for needle in needles):
                return text
            time.sleep(0.5)
        raise AssertionError(f"the page never showed {needles}; it shows:\n{text[:2000]}")

    def click(self, selector: str, label: str) -> None:
        """Click the first `selector` element whose visible text is `label`."""
        clicked = self.evaluate(
            f"""(() => {{
                const el = [...document.querySelectorAll({json.dumps(selector)})]
                    .find(e => e.innerText.trim() === {json.dumps(label)});
                if (!el) return false;
                el.click();
                return true;
            }})()"""
        )
        assert clicked, f"no {selector} labelled {label!r} on the page"

    def click_css(self, selector: str) -> None:
        """Click the first element matching the CSS `selector`."""
        clicked = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return false; el.click(); return true; })()"
        )
        assert clicked, f"nothing on the page matches {selector!r}"

    def type_into(self, element_id: str, text: str) -> None:
        """Type `text` into the input with this id, as keystrokes (date inputs need them)."""
        focused = self.evaluate(
            f"(() => {{ const el = document.getElementById({json.dumps(element_id)});"
            " if (!el) return false; el.focus(); return true; })()"
        )
        assert focused, f"no input #{element_id} on the page"
        self.keys(text)

    def keys(self, text: str) -> None:
        """Type `text` into whatever has the focus, one keystroke per character."""
        for char in text:
            self.call("Input.dispatchKeyEvent", type="keyDown", key=char, text=char)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=char)

    def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key="Enter",
                code="Enter",
                windowsVirtualKeyCode=13,
                **({"text": "\r"} if kind == "keyDown" else {}),
            )

    def screenshot(self, path: Path) -> Path:
        """Let the page settle, then save a PNG of the viewport."""
        time.sleep(1.5)  # animations (modal fade-in, spinners turning into content)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self._exit.close()
        finally:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def browser(chromium: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    shot = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield shot
    finally:
        shot.close()


def another_customer(stack: Stack) -> str:
    """A demo customer other than the demo subject, sharing a household address."""
    warehouse = Warehouse(load_catalog(stack.paths.estate_dir / "catalog.yaml"))
    try:
        with warehouse.engine("warehouse").connect() as conn:
            email = conn.execute(
                sa.text(
                    "SELECT trim(email) FROM crm.customers WHERE lower(trim(email)) != :subject "
                    "AND address_id IN (SELECT address_id FROM crm.customers "
                    "GROUP BY address_id HAVING COUNT(*) > 1) ORDER BY id LIMIT 1"
                ),
                {"subject": DEMO_SUBJECT[1]},
            ).scalar_one()
    finally:
        warehouse.dispose()
    return str(email)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > 8_000, f"{path} is {len(data)} bytes: a blank page?"


def as_role(browser: Browser, stack: Stack, role: str) -> None:
    """Log in as `role` afresh: nothing the UI kept of the previous login stays."""
    browser.call(
        "Storage.clearDataForOrigin",
        origin=stack.base_url,
        storageTypes="cookies,local_storage,session_storage,cache_storage",
    )
    browser.log_in(stack.base_url, stack.token(role))


def desk_row(browser: Browser, ref: str) -> str:
    """The text of the desk's row for `ref` ('' when it is not there)."""
    return str(
        browser.evaluate(
            f"(() => {{ const row = document.querySelector('tr[data-ref={json.dumps(ref)}]');"
            " return row ? row.innerText : ''; })()"
        )
        or ""
    )


def settled_prompts(dpo: AirflowApi) -> list[dict[str, Any]]:
    """The run's prompts once they have all appeared and settled (Airflow 3.3's race)."""
    deadline = time.monotonic() + 240
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pending = dpo.pending_prompts(RUN_ID)
        if pending and len(pending) == len(seen):
            return pending
        state = dpo.run(RUN_ID)["state"]
        assert state not in ("success", "failed"), dpo.explain_failure(RUN_ID)
        seen = pending
        time.sleep(PROMPT_SETTLE_SECONDS)
    raise AssertionError(f"{RUN_ID}'s prompts did not settle within 240 s")


# ---------------------------------------------------------------------------------------------
# The DPO


def test_the_dpo_submits_on_the_desk(
    airflow_standalone: Stack, dpo_api: AirflowApi, browser: Browser
) -> None:
    stack = airflow_standalone
    as_role(browser, stack, "dpo")
    browser.open(f"{stack.base_url}/erasure/desk")
    browser.wait_for_text("Erasure desk", "New erasure request")
    browser.click_css("#new-request")
    browser.wait_for_text("New erasure request", "Identifier type", "Date received")
    browser.type_into("request_ref", REF)
    browser.evaluate("document.getElementById('identifier_type').value = 'email'")
    browser.type_into("identifier", another_customer(stack))
    browser.type_into("notes", NOTES)
    browser.evaluate("document.activeElement.blur()")
    browser.viewport(FORM_HEIGHT)
    assert_png(browser.screenshot(IMAGES / "desk-new-request.png"))
    browser.viewport(HEIGHT)
    browser.click("button", "Submit erasure request")
    text = browser.wait_for_text(f"Request {REF} submitted: run {RUN_ID}")
    assert "Not submitted" not in text
    run = dpo_api.run(RUN_ID)
    assert run["conf"] == {"request_ref": REF, "submission": run["conf"]["submission"]}


def test_the_desk_shows_the_request_awaiting_the_dpo(
    airflow_standalone: Stack, dpo_api: AirflowApi, browser: Browser
) -> None:
    stack = airflow_standalone
    prompts = settled_prompts(dpo_api)
    as_role(browser, stack, "dpo")
    browser.open(f"{stack.base_url}/erasure/desk?status=awaiting_dpo")
    browser.wait_for_text("Erasure desk", REF)
    row = desk_row(browser, REF)
    assert "awaiting DPO" in row and re.search(r"\b\d+ d\b", row), row
    for prompt in prompts:
        assert prompt["subject"].removeprefix("Erasure: ") in row, (prompt["subject"], row)
    browser.viewport(DESK_HEIGHT)
    assert_png(browser.screenshot(IMAGES / "desk-awaiting.png"))
    browser.viewport(HEIGHT)


def answer_in_airflow(browser: Browser, decision: dict[str, Any]) -> None:
    """Fill the Required action form as the DPO does and click the option's button."""
    browser.type_into("element_justification", decision["justification"])
    for param in ("scheduled_by", "standing_until"):
        if decision.get(param):
            day = str(decision[param])  # YYYY-MM-DD, typed as the en-US field order wants
            browser.type_into(f"element_{param}", f"{day[5:7]}{day[8:10]}{day[:4]}")
    if decision.get("exemption"):
        focused = browser.evaluate(
            "(() => { const all = [...document.querySelectorAll('input')];"
            " const at = all.findIndex(e => e.name === 'element_exemption');"
            " const box = all.slice(0, at).reverse()"
            ".find(e => e.getAttribute('role') === 'combobox');"
            " if (!box) return false; box.focus(); return true; })()"
        )
        assert focused, "no exemption field in the prompt"
        browser.keys(f"Art. 17(3)({decision['exemption']})")
        browser.press_enter()
        chosen = browser.evaluate("document.querySelector('input[name=element_exemption]').value")
        assert chosen == decision["exemption"], chosen
    browser.evaluate("document.activeElement.blur()")


def test_the_dpo_answers_each_prompt_from_the_desk(
    airflow_standalone: Stack, dpo_api: AirflowApi, browser: Browser
) -> None:
    stack = airflow_standalone
    decisions = load_decisions()
    as_role(browser, stack, "dpo")
    browser.open(f"{stack.base_url}/erasure/desk")
    browser.wait_for_text(REF)
    links = browser.evaluate(
        f"[...document.querySelectorAll('tr[data-ref={json.dumps(REF)}] a.prompt')]"
        ".map(a => [a.href, a.innerText])"
    )
    assert links, desk_row(browser, REF)
    prompts = {p["subject"]: p for p in dpo_api.pending_prompts(RUN_ID)}
    for href, label in links:
        subject = f"Erasure: {label}"
        dataset, decision = decision_for(subject, prompts[subject]["options"], decisions)
        browser.viewport(PROMPT_HEIGHT)
        browser.open(href)
        browser.wait_for_text(subject, "Justification", decision["option"])
        answer_in_airflow(browser, decision)
        if dataset == SHOWN_PROMPT:
            assert_png(browser.screenshot(IMAGES / "dpo-prompt.png"))
        browser.click("button", decision["option"])
        deadline = time.monotonic() + 60
        while subject in {p["subject"] for p in dpo_api.pending_prompts(RUN_ID)}:
            assert time.monotonic() < deadline, f"the answer on {dataset} was not taken"
            time.sleep(1)
        browser.viewport(HEIGHT)
    assert SHOWN_PROMPT in {label.removeprefix("decide on ") for _, label in links}


def test_the_desk_shows_the_request_complete(
    airflow_standalone: Stack, dpo_api: AirflowApi, browser: Browser
) -> None:
    stack = airflow_standalone
    state, _ = dpo_api.wait(RUN_ID, timeout=RUN_TIMEOUT_SECONDS)
    assert state == "success", dpo_api.explain_failure(RUN_ID)
    as_role(browser, stack, "dpo")
    browser.open(f"{stack.base_url}/erasure/desk")
    browser.wait_for_text(REF, "complete with exemptions")
    row = desk_row(browser, REF)
    assert "complete with exemptions" in row and "evidence" in row, row
    browser.viewport(DESK_HEIGHT)
    assert_png(browser.screenshot(IMAGES / "desk-complete.png"))
    browser.viewport(HEIGHT)


# ---------------------------------------------------------------------------------------------
# The auditor, the operator, the tasks' account


def test_the_auditor_verifies_the_chain_and_opens_the_evidence(
    airflow_standalone: Stack, browser: Browser
) -> None:
    stack = airflow_standalone
    as_role(browser, stack, "auditor")
    browser.open(f"{stack.base_url}/erasure/records")
    text = browser.wait_for_text("Erasure completion records", "Chain verified", REF)
    assert "complete with exemptions" in text
    assert_png(browser.screenshot(IMAGES / "records-page.png"))
    evidence = browser.evaluate(
        f"document.querySelector('a[href=\"api/v1/records/{REF}/export?format=html\"]').href"
    )
    browser.open(evidence)  # the link opens a new tab; here, the same one
    text = browser.wait_for_text(f"request {REF}", "DPO rulings", "How to verify")
    assert "dpo" in text  # the rulings name their author
    assert_png(browser.screenshot(IMAGES / "evidence-page.png"))
    browser.open(f"{stack.base_url}/erasure/api/v1/records/verify")
    browser.wait_for_text('"ok"')
    verified = json.loads(browser.evaluate("document.querySelector('pre').innerText"))
    assert verified["ok"] is True and verified["records"] >= 1, verified


def test_the_auditor_is_refused_the_dpos_pages_and_airflows_run(
    airflow_standalone: Stack, browser: Browser
) -> None:
    stack = airflow_standalone
    as_role(browser, stack, "auditor")
    browser.open(f"{stack.base_url}/erasure/requests/new")
    browser.wait_for_text("Not for your role", "this erasure action is the DPO's")
    run_page = f"{stack.base_url}/dags/{ERASURE_DAG}/runs/{RUN_ID}"
    with httpx.Client(base_url=stack.base_url, trust_env=False, timeout=30) as client:
        client.headers["Authorization"] = f"Bearer {stack.token('auditor')}"
        assert client.get(f"/api/v2/dags/{ERASURE_DAG}/dagRuns/{RUN_ID}").status_code == 403
    browser.open(run_page)
    try:
        text = browser.wait_for_text("403 Forbidden", timeout=PAGE_TIMEOUT_SECONDS / 2)
    except AssertionError:
        # After twenty runs' worth of history the UI has, twice, shown the run's frame with
        # none of it ("No Task Instances found") instead of its error: the API refused it
        # (above) all the same. The page must then show nothing of the run either.
        text = browser.text()
        assert "No Task Instances found" in text, text[:2000]
        assert not any(task in text for task in ("register", "tombstone", "verify")), text
    assert "sub-" not in text  # nothing of the run's conf
    browser.open(f"{stack.base_url}/erasure/desk")
    browser.wait_for_text("Not for your role", "can_read on Erasure Desk")
    browser.viewport(REFUSED_HEIGHT)
    assert_png(browser.screenshot(IMAGES / "auditor-refused.png"))
    browser.viewport(HEIGHT)


def test_the_operator_reads_the_desk_without_the_form(
    airflow_standalone: Stack, browser: Browser
) -> None:
    stack = airflow_standalone
    as_role(browser, stack, "operator")
    browser.open(f"{stack.base_url}/erasure/desk")
    browser.wait_for_text("Erasure desk", REF)
    assert browser.evaluate("document.getElementById('new-request') === null")
    browser.open(f"{stack.base_url}/erasure/requests/new")
    browser.wait_for_text("Not for your role")


def test_the_tasks_account_sees_nothing_of_the_desk(
    airflow_standalone: Stack, browser: Browser
) -> None:
    stack = airflow_standalone
    as_role(browser, stack, TASKS_USER)
    for page in ("/erasure/desk", "/erasure/records"):
        browser.open(f"{stack.base_url}{page}")
        browser.wait_for_text("Not for your role")
    with httpx.Client(base_url=stack.base_url, trust_env=False, timeout=30) as client:
        client.headers["Authorization"] = f"Bearer {stack.token(TASKS_USER)}"
        assert client.get("/erasure/api/v1/respondents").status_code == 200
