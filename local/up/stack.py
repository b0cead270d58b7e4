"""The local stack: Airflow (what `airflow standalone` runs, under the FAB auth manager with
the chart's roles) running this repo's DAGs and plugin, an embedded OpenBao keeping its data
on disk, and the demo estate, wired together by one environment.

`make up` runs it in the foreground; the end-to-end tests start one per session on free
loopback ports. Everything it starts is stopped by its own id: Airflow by its process group
(local/up/components.py with its scheduler, DAG processor, API server, triggerer and their
task workers), OpenBao by its pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx
import yaml

from erasure.config import Settings
from erasure.keys.vault import EmbeddedOpenBao
from erasure.sample.embedded import demo_settings, open_demo
from erasure.sample.rematerialise import REMATERIALISATION_DAGS
from local.demo.runner import airflow_environment, erasure_environment
from local.up.entry_points import metadata_for_checkout
from local.up.metadata_db import MetadataDb, choose_metadata_db, drop_metadata_db

REPO = Path(__file__).resolve().parents[2]
ERASURE_DAG = "gdpr_erasure"
# One login per FAB role of the chart (helm/values.yaml fab.roles) and per role Airflow
# itself creates (Admin, and Viewer, User and Op, to which real deployments map most people).
# The tasks log in as TASKS_USER to trigger rematerialisation DAGs and to read who the DPOs
# are (the prompts are assigned to them); that is all its role allows.
TASKS_USER = "erasure-tasks"
USERS = {
    "admin": "Admin",
    "dpo": "DPO",
    "auditor": "Auditor",
    "operator": "Operator",
    TASKS_USER: "ErasureTasks",
    "viewer": "Viewer",
    "user": "User",
    "op": "Op",
}
PASSWORDS_FILE = "erasure_passwords.json"  # in AIRFLOW_HOME, 0600; kept between starts
# FAB, with the erasure DAGs kept to the roles granted them by name (erasure_airflow/auth.py).
AUTH_MANAGER = "erasure_airflow.auth.ErasureAuthManager"
WEBSERVER_CONFIG = REPO / "helm" / "files" / "webserver_config.py"  # the chart's, as is
HELM_VALUES = REPO / "helm" / "values.yaml"
AIRFLOW_COMMAND = [sys.executable, str(REPO / "local" / "up" / "components.py")]
DEFAULT_PORT = 8080
STARTUP_TIMEOUT_SECONDS = 240.0
STOP_TIMEOUT_SECONDS = 30.0
COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")
# The LocalExecutor that does not fail a HITL task answered as its prompt appears
# (erasure_airflow/patches/executor.py says why).
EXECUTOR = "erasure_airflow.patches.executor.ResumeSafeLocalExecutor"
# `make up UP_ARGS="--executor celery"`: the chart's executor, with the local Redis as its
# broker and the metadata DB as its result backend, and this many workers of this many slots.
CELERY_EXECUTOR = "CeleryExecutor"
CELERY_BROKER = "redis://127.0.0.1:6379"
CELERY_WORKERS = 2
CELERY_CONCURRENCY = 4
EXECUTORS = ("local", "celery")


class StackError(RuntimeError):
    """The stack did not come up; the message names the part and where its log is."""


def free_port(preferred: int | None = None) -> int:
    """`preferred` when nothing on loopback uses it, else a free port the kernel picks."""
    if preferred is not None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class StackPaths:
    """Where one stack keeps its state: Airflow's home, OpenBao's data, the demo estate."""

    airflow_home: Path
    openbao_dir: Path
    estate_dir: Path

    @classmethod
    def under(cls, root: Path, suffix: str = "") -> StackPaths:
        return cls(root / f"airflow{suffix}", root / f"openbao{suffix}", root / f"demo{suffix}")


@dataclass(frozen=True)
class Ports:
    """The loopback ports one stack listens on."""

    api: int
    worker_logs: int
    trigger_logs: int

    @classmethod
    def pick(cls, api: int | None = None) -> Ports:
        """`api` if free (else any free port), plus two more free ports for the log servers."""
        picked = [free_port(api)]
        while len(picked) < 3:
            port = free_port()
            if port not in picked:  # closed sockets: the kernel may offer the same one twice
                picked.append(port)
        return cls(*picked)


def stack_environment(
    home: Path,
    *,
    ports: Ports,
    settings: Settings,
    tasks_password: str,
    lineage_api_key: str | None = None,
    inherited: Mapping[str, str] | None = None,
    executor: str = "local",
) -> dict[str, str]:
    """The whole environment of Airflow's components, their tasks and the API server.

    Starts from `inherited` (default: this process's) without any AIRFLOW_*/ERASURE_*
    variable, so a caller's own Airflow settings (a test session's home) cannot leak in.
    """
    base = dict(os.environ if inherited is None else inherited)
    env = {k: v for k, v in base.items() if not k.startswith(("AIRFLOW", "ERASURE_"))}
    url = f"http://127.0.0.1:{ports.api}"
    bin_dir = str(Path(sys.executable).parent)  # standalone runs `airflow` from PATH
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    loopback = "127.0.0.1,localhost"
    env["NO_PROXY"] = env["no_proxy"] = ",".join(filter(None, [env.get("NO_PROXY"), loopback]))
    env.update(airflow_environment(home))
    env["PYTHONPATH"] = package_path(home, env.get("PYTHONPATH", ""))
    env.update(
        {
            # Not 32 idle workers; enough that eight requests' tasks interleave (waits for a
            # DPO or a rematerialisation run hold no slot: they are deferred).
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__EXECUTOR": EXECUTOR if executor == "local" else CELERY_EXECUTOR,
            # As the chart: a task whose upstream ended starts within 0.2 s, not up to 1 s.
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(ports.api),
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports.worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.trigger_logs),
        }
    )
    env.update(auth_environment(home))
    env.update(erasure_environment(settings))
    env.update(
        {
            # Only a user holding the DPO role rules; the tasks ask the API server who does.
            "ERASURE_REQUIRE_DPO_ROLE": "true",
            # Tasks reach Airflow over REST to trigger rebuilds.
            "ERASURE_AIRFLOW_ACCESS": "rest",
            "ERASURE_AIRFLOW_API_URL": url,
            "ERASURE_AIRFLOW_API_USER": TASKS_USER,
            "ERASURE_AIRFLOW_API_PASSWORD": tasks_password,
        }
    )
    if lineage_api_key is not None:
        # Airflow's OpenLineage provider reports every task run to the erasure plugin's
        # Marquez-compatible endpoint, authenticated by the lineage API key.
        env.update(openlineage_environment(url, lineage_api_key))
    return env


def package_path(home: Path, inherited: str) -> str:
    """PYTHONPATH for every component: this checkout first (erasure, erasure_airflow), then the
    entry points the installed metadata lacks (local.up.entry_points), then `inherited`."""
    entries = [str(REPO)]
    found = metadata_for_checkout(home / "checkout-metadata")
    if found is not None:
        print(
            f"the installed erasure package does not register this checkout's entry points: "
            f"declared from {found} (pip install -e {REPO} makes this needless)",
            flush=True,
        )
        entries.append(str(found))
    return os.pathsep.join([*entries, *(p for p in inherited.split(os.pathsep) if p)])


def openlineage_environment(api_url: str, lineage_api_key: str) -> dict[str, str]:
    """The OpenLineage provider's http transport to `<api>/erasure/api/v1/lineage`."""
    transport = {
        "type": "http",
        # The client joins url and endpoint as URLs: a path on `url` would be replaced.
        "url": api_url,
        "endpoint": "erasure/api/v1/lineage",
        "auth": {"type": "api_key", "apiKey": lineage_api_key},
        "timeout": 10,
    }
    # The chart's DAGs that report no lineage: the erasure's own (helm/values.yaml says why).
    silent = yaml.safe_load(HELM_VALUES.read_text())["openlineage"]["silentDags"]
    policy = [
        {"scope": {"dag_id": "|".join(silent)}, "match_mode": "regex", "controls": {"emit": False}}
    ]
    return {
        "ERASURE_LINEAGE_API_KEY": lineage_api_key,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "airflow",
        "AIRFLOW__OPENLINEAGE__EMISSION_POLICY": json.dumps(policy),
    }


def auth_environment(home: Path) -> dict[str, str]:
    """The FAB auth manager, configured by the chart's webserver_config.py (copied to `home`)."""
    return {
        "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
        "AIRFLOW__FAB__CONFIG_FILE": str(home / "webserver_config.py"),
        # Role and permission changes reach a logged-in user within this many seconds.
        "AIRFLOW__FAB__CACHE_TTL": "5",
    }


def dag_bundles_environment(extra: Mapping[str, Path]) -> dict[str, str]:
    """Further DAG folders (e.g. a test's own DAGs) as bundles beside the repo's dags/."""
    if not extra:
        return {}
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    bundles = [{"name": "dags-folder", "classpath": local, "kwargs": {}}]
    bundles += [
        {"name": name, "classpath": local, "kwargs": {"path": str(path)}}
        for name, path in extra.items()
    ]
    return {"AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles)}


def seed_passwords(home: Path) -> dict[str, str]:
    """Every login's password, generated once into `home`'s passwords file (0600).

    local.up.fab_setup gives each FAB user the password from this file when Airflow starts;
    the tasks get theirs in their environment.
    """
    path = home / PASSWORDS_FILE
    passwords = _read_passwords(path)
    if not passwords.keys() >= USERS.keys():
        passwords = {user: passwords.get(user) or secrets.token_urlsafe(18) for user in USERS}
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(passwords) + "\n")
    return passwords


def write_fab_config(home: Path) -> None:
    """The chart's webserver_config.py in `home`, where auth_environment points FAB."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "webserver_config.py").write_text(WEBSERVER_CONFIG.read_text())


def _read_passwords(path: Path) -> dict[str, str]:
    try:
        loaded = json.loads(path.read_text() or "{}")
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise StackError(f"{path} is not JSON ({exc}): remove it to have it regenerated") from None
    return {str(k): str(v) for k, v in loaded.items()}


BROKER_OWNER = "erasure:up:owner"  # the pid of the stack process that holds a database


def claim_redis_db(broker: str, seed: int) -> str:
    """A database of the Redis at `broker` (1-15; 0 is left to others) for one stack: one no
    live stack holds (no owner, or its owner's process is gone: what kombu left there is
    flushed), tried from one picked by `seed`; its URL. StackError if Redis does not answer
    or every database is held."""
    import redis

    for step in range(15):
        url = f"{broker}/{1 + (seed + step) % 15}"
        try:
            client = redis.Redis.from_url(url)
            owner = client.get(BROKER_OWNER)
            if owner is not None and _alive(int(owner)):
                continue
            client.flushdb()
            if client.set(BROKER_OWNER, os.getpid(), nx=True):
                return url
        except redis.RedisError as exc:
            raise StackError(f"the Celery broker {broker} does not answer ({exc})") from None
    raise StackError(f"every database 1-15 of {broker} is held by a running stack")


def release_redis_db(url: str) -> None:
    """Flush the stack's broker database (its queues, kombu's bindings, the owner mark)."""
    import redis

    with contextlib.suppress(redis.RedisError):  # Redis gone: nothing of it to release
        redis.Redis.from_url(url).flushdb()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Stack:
    """One running stack; `start()` returns when Airflow serves the erasure DAG and plugin."""

    def __init__(
        self,
        paths: StackPaths,
        *,
        port: int | None = None,
        rebuild_estate: bool = False,
        startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
        metadata_database: str = "erasure_airflow",
        drop_metadata_on_stop: bool = False,
        extra_dag_folders: Mapping[str, Path] | None = None,
        executor: str = "local",
        celery_broker: str = CELERY_BROKER,
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        if executor not in EXECUTORS:
            raise StackError(f"unknown executor {executor!r}: one of {', '.join(EXECUTORS)}")
        self.executor = executor
        self.celery_broker = celery_broker  # a Redis URL without its database
        self.broker_url: str | None = None  # the database claimed, released at stop
        self.paths = paths
        self.extra_dag_folders = dict(extra_dag_folders or {})
        self.overrides = dict(overrides or {})  # ERASURE_* variables over the stack's own
        self.metadata_database = metadata_database
        self.drop_metadata_on_stop = drop_metadata_on_stop
        self.metadata: MetadataDb | None = None
        self.ports = Ports.pick(port)
        self.rebuild_estate = rebuild_estate
        self.startup_timeout = startup_timeout
        self.bao = EmbeddedOpenBao(data_dir=paths.openbao_dir)
        self.settings: Settings | None = None
        self.env: dict[str, str] = {}
        self.passwords: dict[str, str] = {}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = paths.airflow_home / "standalone.log"
        self.estate_built = False
        self.lineage_api_key = "ol-" + secrets.token_urlsafe(32)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.api}"

    @property
    def pgid(self) -> int | None:
        """Airflow's process group: local/up/components.py leads it (setsid)."""
        return self.process.pid if self.process is not None else None

    def token(self, user: str = "admin") -> str:
        """A JWT for `user` from `POST /auth/token`."""
        with httpx.Client(base_url=self.base_url, timeout=30, trust_env=False) as client:
            response = client.post(
                "/auth/token", json={"username": user, "password": self.passwords[user]}
            )
        if response.status_code != 201:
            raise StackError(f"login as {user} failed: HTTP {response.status_code} {response.text}")
        return str(response.json()["access_token"])

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Stack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        home = self.paths.airflow_home
        home.mkdir(parents=True, exist_ok=True)
        self.bao.start()
        estate = self.paths.estate_dir
        if self.rebuild_estate or not (estate / "catalog.yaml").exists():
            settings = open_demo(estate, self.bao)
            self.estate_built = True
        else:
            settings = demo_settings(estate, self.bao)  # kept from the last start
        self.settings = settings
        self.passwords = seed_passwords(home)
        write_fab_config(home)
        self.env = stack_environment(
            home,
            ports=self.ports,
            settings=settings,
            tasks_password=self.passwords[TASKS_USER],
            lineage_api_key=self.lineage_api_key,
            executor=self.executor,
        )
        self.env.update(self._metadata_environment())
        self.env.update(self._celery_environment())
        self.env.update(dag_bundles_environment(self.extra_dag_folders))
        self.env.update(self.overrides)
        log = self.log_path.open("ab")
        try:
            # start_new_session: setsid(2) in the child, so its pid is the group's id and one
            # signal to the group stops every Airflow process, task workers included.
            self.process = subprocess.Popen(
                AIRFLOW_COMMAND,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=home,
                start_new_session=True,
            )
        finally:
            log.close()
        self._wait_healthy()

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop Airflow's process group (TERM; KILL after `timeout` s) and OpenBao by its pid."""
        process, self.process = self.process, None
        if process is not None:
            _stop_group(process, timeout)
        self.bao.stop()
        if self.broker_url is not None:
            release_redis_db(self.broker_url)
            self.broker_url = None
        if self.drop_metadata_on_stop and self.metadata is not None:
            drop_metadata_db(self.metadata)

    def _metadata_environment(self) -> dict[str, str]:
        """Airflow's metadata DB: its own Postgres database when the local server answers,
        else SQLite in its home, with a warning on stderr that says what SQLite cannot take."""
        self.metadata = choose_metadata_db(self.paths.airflow_home, self.metadata_database)
        if self.metadata.warning is not None:
            print(f"WARNING: {self.metadata.warning}", file=sys.stderr, flush=True)
        return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.metadata.url}

    def _claim_broker(self) -> str:
        self.broker_url = claim_redis_db(self.celery_broker, self.ports.api)
        return self.broker_url

    def _celery_environment(self) -> dict[str, str]:
        """The Celery executor's broker (a Redis database this stack holds, so a stack beside
        another never takes its tasks; flushed at stop), its result backend (the metadata
        DB), and the workers local/up/components.py starts."""
        if self.executor != "celery":
            return {}
        assert self.metadata is not None
        return {
            "AIRFLOW__CELERY__BROKER_URL": self._claim_broker(),
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{self.metadata.url}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(CELERY_CONCURRENCY),
            # Every task forked with the domain loaded (erasure_airflow/celery_config.py).
            "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "erasure_airflow.celery_config.CELERY_CONFIG",
            "ERASURE_UP_CELERY_WORKERS": str(CELERY_WORKERS),
        }

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- readiness --------------------------------------------------------------------------

    def _wait_healthy(self) -> None:
        """Until every component is healthy and the DAGs and the plugin are served."""
        deadline = time.monotonic() + self.startup_timeout
        waiting_for: str | None = "the API server"
        with httpx.Client(base_url=self.base_url, timeout=10, trust_env=False) as client:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    waiting_for = self._not_ready(client)
                except httpx.HTTPError:
                    waiting_for = "the API server"
                if waiting_for is None:
                    return
                time.sleep(1)
        raise StackError(
            f"Airflow at {self.base_url} was not ready within {self.startup_timeout:.0f} s "
            f"(waiting for {waiting_for}); see {self.log_path}:\n{self.log_tail()}"
        )

    def _not_ready(self, client: httpx.Client) -> str | None:
        """What is not ready yet, or None."""
        health = client.get("/api/v2/monitor/health")
        if health.status_code != 200:
            return "the API server"
        body = health.json()
        sick = [c for c in COMPONENTS if (body.get(c) or {}).get("status") != "healthy"]
        if sick:
            return ", ".join(sick)
        headers = {"Authorization": f"Bearer {self.token('admin')}"}
        errors = client.get("/api/v2/importErrors", headers=headers).json()
        if errors.get("total_entries"):
            text = "\n".join(
                f"{e.get('filename')}: {e.get('stack_trace')}" for e in errors["import_errors"]
            )
            raise StackError(f"Airflow cannot import DAG files:\n{text}")
        for dag_id in (ERASURE_DAG, *REMATERIALISATION_DAGS):
            if client.get(f"/api/v2/dags/{dag_id}", headers=headers).status_code != 200:
                return f"the DAG {dag_id} to be parsed"
        plugin = client.get("/erasure/api/v1/requests", headers=headers)
        if plugin.is_server_error:  # e.g. 503 while another component migrates the store
            return f"the erasure plugin (HTTP {plugin.status_code}: {plugin.text[:300]})"
        if plugin.status_code != 200:
            raise StackError(
                f"the erasure plugin does not answer GET /erasure/api/v1/requests "
                f"(HTTP {plugin.status_code}: {plugin.text[:500]}); see {self.log_path}"
            )
        return None

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise StackError(
                f"Airflow exited with status {self.process.returncode}; see "
                f"{self.log_path}:\n{self.log_tail()}"
            )
        if not self.bao.running:
            raise StackError(f"OpenBao (data in {self.paths.openbao_dir}) stopped")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


def _stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """TERM the process group `process` leads, wait for it to empty, then KILL what is left."""
    pgid = process.pid
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            process.poll()  # reap the leader; its children are reaped by init
            if not _group_alive(pgid):
                return
            time.sleep(0.2)
    process.poll()


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False
