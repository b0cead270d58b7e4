"""Screenshots of the UI a DPO and an auditor use, taken from the running standalone stack.

Headless Chromium driven over the Chrome DevTools Protocol (`websockets`, which Airflow
installs): log in by setting the UI's `_token` cookie to a JWT, open the page, wait until it
shows what it should, and save a PNG in docs/img/:

- trigger-form.png: the gdpr_erasure trigger form, its Params with their titles;
- dpo-prompt.png:   a pending DPO decision on an escalated artefact (the task's HITL panel);
- records-page.png: the plugin's completion records page, as an auditor sees it.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from websockets.sync.client import ClientConnection, connect

from erasure.catalog import load_catalog
from erasure.prompts import PROMPT_PREFIX
from erasure.sample.seed import DEMO_SUBJECT
from erasure.warehouse import Warehouse
from local.demo.runner import load_decisions
from local.up.stack import REPO, Stack
from tests.e2e.conftest import AirflowApi, erasure_request

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
REF = f"DSR-SHOT-{uuid.uuid4().hex[:8]}"
RUN_ID = f"erasure-{REF}"
FORM_HEIGHT = 1350  # the whole trigger form, Trigger button included
PROMPT_HEIGHT = 1080  # the prompt with its option buttons
PARAM_TITLES = (
    "Request reference",
    "Identifier type",
    "Identifier",
    "Date received",
    "Legal ground",
    "Notes",
    "Dry run",
)
PROMPT_FOR = "crm.addresses"  # the shared household address: the most telling escalation


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

    def type_into(self, element_id: str, text: str) -> None:
        """Type `text` into the input with this id, as keystrokes (date inputs need them)."""
        focused = self.evaluate(
            f"(() => {{ const el = document.getElementById({json.dumps(element_id)});"
            " if (!el) return false; el.focus(); return true; })()"
        )
        assert focused, f"no input #{element_id} on the page"
        for char in text:
            self.call("Input.dispatchKeyEvent", type="keyDown", key=char, text=char)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=char)

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
    """A demo customer other than the demo subject: the screenshots' request is theirs."""
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
    assert len(data) > 30_000, f"{path} is {len(data)} bytes: a blank page?"


def test_trigger_form(airflow_standalone: Stack, browser: Browser) -> None:
    """The DPO's form, filled in as for a request by email (not submitted)."""
    stack = airflow_standalone
    browser.viewport(FORM_HEIGHT)
    browser.log_in(stack.base_url, stack.token("dpo"))
    browser.open(f"{stack.base_url}/dags/gdpr_erasure")
    browser.wait_for_text("gdpr_erasure", "Trigger")
    browser.click("button", "Trigger")
    text = browser.wait_for_text(*PARAM_TITLES)
    assert "This field is required" in text  # the Params' own validation, before typing
    # Params render as inputs named element_<param>; the date field takes keystrokes (M/D/Y).
    browser.type_into("element_request_ref", "DSR-2026-0042")
    browser.type_into("element_identifier", DEMO_SUBJECT[1])
    browser.type_into("element_received_on", date.today().strftime("%m%d%Y"))  # en-US
    browser.type_into("element_notes", "Asked by email to be forgotten.")
    browser.evaluate("document.activeElement.blur()")
    text = browser.wait_for_text(*PARAM_TITLES, "DSR-2026-0042")
    assert "This field is required" not in text
    path = browser.screenshot(IMAGES / "trigger-form.png")
    assert_png(path)
    browser.viewport(HEIGHT)


def test_dpo_prompt(airflow_standalone: Stack, dpo_api: AirflowApi, browser: Browser) -> None:
    stack = airflow_standalone
    dpo_api.submit(erasure_request(REF, another_customer(stack)))
    deadline = time.monotonic() + 180
    prompt: dict[str, Any] | None = None
    while prompt is None:
        named = [
            p for p in dpo_api.pending_prompts(RUN_ID) if p["subject"] == PROMPT_PREFIX + PROMPT_FOR
        ]
        if named:
            prompt = named[0]
            break
        state = dpo_api.run(RUN_ID)["state"]
        assert state not in ("success", "failed"), f"{RUN_ID} ended {state} without asking"
        assert time.monotonic() < deadline, f"no prompt on {PROMPT_FOR} within 180 s"
        time.sleep(2)
    ti = prompt["task_instance"]
    browser.viewport(PROMPT_HEIGHT)
    browser.log_in(stack.base_url, stack.token("dpo"))
    browser.open(
        f"{stack.base_url}/dags/gdpr_erasure/runs/{RUN_ID}/tasks/dpo_decides/"
        f"mapped/{ti['map_index']}/required_actions"
    )
    browser.wait_for_text(prompt["subject"], "Justification", "Delete this row")
    path = browser.screenshot(IMAGES / "dpo-prompt.png")
    assert_png(path)
    browser.viewport(HEIGHT)
    # The DPO answers (as in the picture) and the run completes: the records page shows it.
    state, answered = dpo_api.wait(RUN_ID, decisions=load_decisions())
    assert state == "success", dpo_api.explain_failure(RUN_ID)
    assert answered


def test_records_page(airflow_standalone: Stack, browser: Browser) -> None:
    stack = airflow_standalone
    browser.log_in(stack.base_url, stack.token("auditor"))
    browser.open(f"{stack.base_url}/erasure/records")
    text = browser.wait_for_text("Erasure completion records", "Chain verified")
    assert REF in text
    path = browser.screenshot(IMAGES / "records-page.png")
    assert_png(path)
