"""The FastAPI app the plugin mounts at `/erasure`: JSON API, records page, error mapping."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from erasure.errors import ConfigError, ErasureError, StoreError, VaultError
from erasure_airflow.api import dashboard, desk, pages, respondents, resume, routes
from erasure_airflow.api.auth import login_url
from erasure_airflow.api.backend import ErasureBackend, Unavailable
from erasure_airflow.api.csrf import SameOriginJson
from erasure_airflow.api.rendering import render

# What an operator fixes (settings, the store, Vault) is 503; the message names what to check.
_UNAVAILABLE = (Unavailable, StoreError, VaultError, ConfigError)


def create_app(backend: ErasureBackend | None = None) -> FastAPI:
    """A new erasure app over `backend` (default: built from the environment on first use)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.erasure.close()

    app = FastAPI(
        title="erasure",
        description="GDPR Art. 17 erasure: lineage ingest, requests, completion records.",
        lifespan=lifespan,
        # No open schema or docs pages: every route of this app needs an Airflow user.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.erasure = backend if backend is not None else ErasureBackend()
    app.include_router(routes.router)
    app.include_router(desk.api)
    app.include_router(resume.router)
    app.include_router(pages.router)
    app.include_router(desk.pages)
    app.include_router(dashboard.api)
    app.include_router(dashboard.pages)
    app.include_router(respondents.router)
    app.add_exception_handler(StarletteHTTPException, _refused_page)
    app.add_exception_handler(RequestValidationError, _invalid_parameters)
    app.add_exception_handler(ErasureError, _erasure_error)
    app.add_exception_handler(sa.exc.SQLAlchemyError, _database_error)
    # Before any route: a state-changing request is JSON, and a cookie one same-origin.
    app.add_middleware(SameOriginJson)
    return app


async def _refused_page(request: Request, exc: Exception) -> Response:
    """A person not logged in is sent to Airflow's login and comes back to the page (the
    evidence page too, under /api/); one opening a page they may not see gets a page that
    says why; the API, JSON."""
    assert isinstance(exc, StarletteHTTPException)
    wants_page = "text/html" in request.headers.get("accept", "")
    if exc.status_code == 401 and wants_page and request.method == "GET":
        return RedirectResponse(login_url(request), status_code=status.HTTP_303_SEE_OTHER)
    if exc.status_code != 403 or not wants_page or "/api/" in request.url.path:
        return await http_exception_handler(request, exc)
    root = str(request.scope.get("root_path") or "").removesuffix("/erasure")
    return HTMLResponse(
        render(
            "refused.html",
            title="Not for your role",
            detail=html.escape(str(exc.detail)),
            home=html.escape(f"{root}/"),
        ),
        status_code=exc.status_code,
        headers=getattr(exc, "headers", None),
    )


async def _invalid_parameters(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each bad parameter and what it accepts. FastAPI's own answer also quotes the
    value sent, and that may be a subject's identifier typed into the wrong box."""
    assert isinstance(exc, RequestValidationError)
    detail = [without_input(error) for error in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def without_input(error: Mapping[str, Any]) -> dict[str, Any]:
    """A validation error as location, type and what is expected, never what was sent: no
    `input`, no `ctx`; an unknown field's name (it was typed) and a message that quotes the
    value are replaced."""
    loc = list(error.get("loc", ()))
    kind = str(error.get("type", "value_error"))
    if kind == "extra_forbidden" and loc:
        loc[-1] = "<unknown field>"
    message = str(error.get("msg", ""))
    sent = error.get("input")
    if isinstance(sent, str | int | float) and str(sent) and str(sent) in message:
        message = "the value is not valid here"
    return {"type": kind, "loc": loc, "msg": message}


async def _erasure_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, VaultError):  # e.g. a restarted dev server with a new token
        request.app.state.erasure.forget_vault()
    code = (
        status.HTTP_503_SERVICE_UNAVAILABLE
        if isinstance(exc, _UNAVAILABLE)
        else status.HTTP_500_INTERNAL_SERVER_ERROR
    )
    # erasure's messages never carry a subject identifier (erasure.errors), so they are shown.
    return JSONResponse({"detail": str(exc)}, status_code=code)


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    orig = getattr(exc, "orig", None) or exc
    # The driver's class only: its message may quote SQL parameters.
    return JSONResponse(
        {
            "detail": f"a database query failed ({type(orig).__name__}): check that the erasure "
            "store (ERASURE_STORE_URL) and Airflow's metadata database are up"
        },
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
    )


app = create_app()
