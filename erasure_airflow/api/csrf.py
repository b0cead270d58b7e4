"""What a request that changes something must carry, so no other site can act in a logged-in
person's name (cross-site request forgery).

Every POST, PUT, PATCH or DELETE to the erasure app must send a JSON body (`Content-Type:
application/json`; anything else is 415), and then either:

- an explicit credential, `Authorization: Bearer <token>` (a script, the lineage key): a
  browser never adds one on its own, so another site cannot make it send one; or
- the Airflow UI's login cookie from the UI's own pages: the `Origin` header (or, without
  one, `Sec-Fetch-Site: same-origin`) must name this server's host (the Host header, the
  X-Forwarded-Host a proxy sets, or the host of Airflow's `[api] base_url`), else 403
  saying why.

A request with neither credential passes on to the route, whose login check answers 401. A
form on another site can send neither JSON nor an Authorization header without the browser
asking this server first (a CORS preflight, which it does not allow), and its Origin names
that site. Nothing a caller sent is repeated in a refusal.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
DEFAULT_PORTS = {"http": 80, "https": 443}

NOT_JSON = (
    "send the body as JSON (Content-Type: application/json): this route takes JSON only, "
    "which also keeps a form on another site from acting in your name"
)
CROSS_SITE = (
    "refused: this request was sent from another site (its Origin is not this server) with "
    "the Airflow UI's login cookie; act from the erasure pages of this Airflow, or send "
    "Authorization: Bearer <token> from a script"
)
NO_ORIGIN = (
    "refused: a request authenticated by the Airflow UI's login cookie must say it comes from "
    "this server's own pages (an Origin or Sec-Fetch-Site: same-origin header), and this one "
    "says neither; use a current browser on the erasure pages, or send Authorization: Bearer "
    "<token> from a script"
)


class SameOriginJson:
    """ASGI middleware: a state-changing request is JSON, and a cookie one is same-origin."""

    def __init__(self, app: ASGIApp, public_url: str | None = None) -> None:
        self.app = app
        self.public_url = public_url  # None: Airflow's [api] base_url, read on first use

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        if self.public_url is None:
            self.public_url = _airflow_base_url()
        refusal = refusal_of(_headers(scope), self.public_url)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def refusal_of(headers: dict[str, str], public_url: str = "") -> tuple[int, str] | None:
    """(status, why) for a state-changing request with these (lower-cased) headers, or None
    if it may go on to the route; `public_url` is the address people open Airflow at."""
    if not is_json(headers.get("content-type", "")):
        return 415, NOT_JSON
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return None  # an explicit credential: no browser sends one by itself
    if "cookie" not in headers:
        return None  # no credential at all: the route's login check answers 401
    origin = headers.get("origin")
    if origin is not None:
        return None if same_host(origin, headers, public_url) else (403, CROSS_SITE)
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is None:
        return 403, NO_ORIGIN
    return None if fetch_site.strip().lower() == "same-origin" else (403, CROSS_SITE)


def is_json(content_type: str) -> bool:
    """Whether a Content-Type is application/json (parameters such as charset allowed)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def same_host(origin: str, headers: dict[str, str], public_url: str = "") -> bool:
    """Whether `origin` names the host the request was sent to (Host, the Host a proxy
    forwarded, or `public_url`'s): same name and port, the port defaulting by the scheme."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False  # "null" (a sandboxed page, a file), or not a web origin at all
    wanted = (parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme])
    hosts = [headers.get("host", "")]
    hosts += [h for h in headers.get("x-forwarded-host", "").split(",") if h.strip()]
    public = urlsplit(public_url)
    if public.scheme == parts.scheme and public.netloc:
        hosts.append(public.netloc)
    for host in hosts:
        try:
            served = urlsplit(f"{parts.scheme}://{host.strip()}")
            served_port = served.port
        except ValueError:
            continue
        if (
            served.hostname
            and (
                served.hostname.lower(),
                served_port or DEFAULT_PORTS[parts.scheme],
            )
            == wanted
        ):
            return True
    return False


def _airflow_base_url() -> str:
    """Airflow's `[api] base_url` (empty when unset or unreadable)."""
    try:
        from airflow.configuration import conf

        return str(conf.get("api", "base_url", fallback="") or "")
    except Exception:  # Airflow's configuration is not there: Host and X-Forwarded-Host only
        return ""


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-cased name (a repeated one: its first value, except
    Cookie, which only needs to be present)."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        found.setdefault(name, raw_value.decode("latin-1"))
    return found
