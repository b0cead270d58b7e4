"""The FastAPI app the plugin mounts at `/erasure`: JSON API, records page, error mapping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy as sa
from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from erasure.errors import ConfigError, ErasureError, StoreError, VaultError
from erasure_api import desk, pages, resume, routes
from erasure_api.backend import ErasureBackend, Unavailable

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
    app.add_exception_handler(ErasureError, _erasure_error)
    app.add_exception_handler(sa.exc.SQLAlchemyError, _database_error)
    return app


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
