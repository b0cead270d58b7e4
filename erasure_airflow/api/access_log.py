"""What the API server's access log keeps of a request to the erasure app: the route it took,
never a value typed into its URL.

A reference typed into `/erasure/api/v1/requests/<ref>` or a filter in `?since=` may be a
subject's email pasted into the wrong box. Airflow 3.3's API server writes one access record
per request from `HttpAccessLogMiddleware` (structlog logger `http.access`, fields `path`
and `query`; uvicorn's own access log is switched off), and uvicorn or gunicorn write theirs
(`uvicorn.access`) where an operator turns it on. For a path under the erasure app's mount
prefix both are rewritten before they are written: the path becomes its route template
(`/erasure/api/v1/requests/{ref}`; a path that is no route, `/erasure/<not a route>`) and a
query string, whatever it holds, `<redacted>`. Every other path (Airflow's own routes) keeps
its route, but a path segment or a query value that reads as an identifier (an email address,
a customer number of seven digits or more, a phone number of nine once spaces and punctuation
are left out; dates, times and UUIDs excepted) is `<redacted>`.

`install` is called by the plugin when Airflow loads it (erasure_airflow.plugin), and again
by `KeepRedacting` (a root middleware the plugin registers) on any request that finds it
gone: the API server configures its logging again after plugins load (under the FAB auth
manager, seen on Airflow 3.3.2), which drops a processor installed before.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

import structlog
from starlette.routing import BaseRoute

ACCESS_LOGGER = "http.access"  # airflow.api_fastapi.common.http_access_log
UVICORN_ACCESS_LOGGER = "uvicorn.access"
MOUNT_PREFIX = "/erasure"  # the plugin's url_prefix
REDACTED = "<redacted>"
NOT_A_ROUTE = "<not a route>"


class UrlRedactor:
    """Rewrites a path under the erasure app's prefixes to its route template."""

    def __init__(self, routes: Iterable[BaseRoute], prefixes: Iterable[str]) -> None:
        self.templates: list[tuple[re.Pattern[str], str]] = [
            (regex, template)
            for route in routes
            if isinstance(regex := getattr(route, "path_regex", None), re.Pattern)
            and isinstance(template := getattr(route, "path", None), str)
        ]
        # Longest first: a root path's `/airflow/erasure` before `/erasure`.
        self.prefixes = sorted({p.rstrip("/") for p in prefixes if p.strip("/")}, key=len)[::-1]

    def prefix_of(self, path: str) -> str | None:
        """The mount prefix `path` is under, or None when it is not the erasure app's."""
        for prefix in self.prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                return prefix
        return None

    def redact(self, path: str, query: str) -> tuple[str, str]:
        """(path, query) as the log may keep them."""
        prefix = self.prefix_of(path)
        if prefix is None:
            return identifiers_redacted(path, query)
        rest = path[len(prefix) :]
        template = next((t for regex, t in self.templates if regex.fullmatch(rest)), None)
        shown = prefix + template if template is not None else f"{prefix}/{NOT_A_ROUTE}"
        return shown, REDACTED if query else ""

    def redact_url(self, url: str) -> str:
        """A path with its query (`/p?q`, as uvicorn logs it, percent-encoded), redacted."""
        raw_path, sep, query = url.partition("?")
        path = unquote(raw_path)
        shown, kept = self.redact(path, query if sep else "")
        if (shown, kept) == (path, query if sep else ""):
            return url
        return f"{shown}?{kept}" if kept else shown


# What is not an identifier although it holds digits: an ISO date or time (Airflow's own
# filters), a compact timestamp (`extend-<ref>-20261203T140501123456` run ids), a UUID (task
# instance ids on the execution API).
_NOT_IDENTIFYING = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
    r"|\d{8}T\d{6,12}"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_JOINERS = re.compile(r"[\s()\[\].+\-/_,]")
_DIGITS = re.compile(r"\d{7,}")  # a customer or account number
_JOINED_DIGITS = re.compile(r"\d{9,}")  # a phone number written in groups


def identifying(value: str) -> bool:
    """Whether `value` reads as an identifier: an email address, a run of seven digits or
    more (any script's), or of nine once spaces and punctuation are left out (a phone number
    in groups; a reference such as DSR-2026-0042 is not one), dates and times aside."""
    if "@" in value or "%40" in value.lower():  # decoded once, an address encoded twice
        return True
    undated = _NOT_IDENTIFYING.sub(" ", value)
    return bool(_DIGITS.search(undated) or _JOINED_DIGITS.search(_JOINERS.sub("", undated)))


def identifiers_redacted(path: str, query: str) -> tuple[str, str]:
    """A path of another app with each segment and query value that reads as an identifier
    replaced by REDACTED (`path` is decoded; `query` as sent)."""
    segments = path.split("/")
    if any(identifying(s) for s in segments):
        path = "/".join(REDACTED if identifying(s) else s for s in segments)
    if query and identifying(unquote(query)):
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(
            f"{quote(key, safe='')}={REDACTED if identifying(value) else quote(value, safe='')}"
            for key, value in pairs
        )
    return path, query


class AccessEventRedaction:
    """A structlog processor: the `http.access` event, its path and query redacted."""

    def __init__(self, redactor: UrlRedactor) -> None:
        self.redactor = redactor

    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = event_dict.get("logger_name") or getattr(logger, "name", None)
        path = event_dict.get("path")
        if name == ACCESS_LOGGER and isinstance(path, str):
            query = event_dict.get("query")
            shown, kept = self.redactor.redact(path, query if isinstance(query, str) else "")
            event_dict["path"] = shown
            if "query" in event_dict:
                event_dict["query"] = kept
        return event_dict


class AccessRecordRedaction(logging.Filter):
    """A logging filter for uvicorn's access records, `(client, method, path?query, http
    version, status)`: the path and query redacted. It never drops a record."""

    def __init__(self, redactor: UrlRedactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], self.redactor.redact_url(args[2]), *args[3:])
        return True


def redactor_for(routes: Iterable[BaseRoute], root_path: str = "") -> UrlRedactor:
    """The redactor of an app mounted at MOUNT_PREFIX, also under Airflow's `root_path`."""
    prefixes = [MOUNT_PREFIX]
    if root_path.strip("/"):
        prefixes.append("/" + root_path.strip("/") + MOUNT_PREFIX)
    return UrlRedactor(routes, prefixes)


def install(redactor: UrlRedactor) -> None:
    """Redact the access records of this process from now on (once: a second call replaces
    the first redactor)."""
    processors = structlog.get_config()["processors"]
    if not isinstance(processors, list):  # configured with a tuple: configure a list
        processors = list(processors)
        structlog.configure(processors=processors)
    for i, processor in enumerate(processors):
        if isinstance(processor, AccessEventRedaction):
            processors[i] = AccessEventRedaction(redactor)
            break
    else:
        # First: no processor after it (the renderer above all) sees the path as sent.
        processors.insert(0, AccessEventRedaction(redactor))
    access = logging.getLogger(UVICORN_ACCESS_LOGGER)
    for old in [f for f in access.filters if isinstance(f, AccessRecordRedaction)]:
        access.removeFilter(old)
    access.addFilter(AccessRecordRedaction(redactor))


def installed() -> bool:
    """Whether this process's structlog configuration holds the redaction."""
    return any(isinstance(p, AccessEventRedaction) for p in structlog.get_config()["processors"])


class KeepRedacting:
    """Pure ASGI middleware around Airflow's root app (registered by erasure_airflow.plugin):
    installs the plugin's redactor again before a request whenever the logging configuration
    lost it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not installed():
            install(plugin_redactor())
        await self.app(scope, receive, send)


def plugin_redactor() -> UrlRedactor:
    """The redactor of the erasure app the plugin mounts, under Airflow's base URL's path."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    from erasure_airflow.api import app

    return redactor_for(app.routes, urlsplit(conf.get("api", "base_url", fallback="") or "").path)
