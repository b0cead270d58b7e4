"""`make up`: start the stack in var/, print where it is and how to log in, run until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from types import FrameType

from erasure.sample.seed import DEMO_SUBJECT
from local.up.metadata_db import forget_metadata_db
from local.up.stack import (
    DEFAULT_PORT,
    EXECUTORS,
    PASSWORDS_FILE,
    REPO,
    TASKS_USER,
    USERS,
    Stack,
    StackError,
    StackPaths,
)

VAR = REPO / "var"
PATHS = StackPaths.under(VAR, "-up")  # var/airflow-up, var/openbao-up, var/demo-up
METADATA_DATABASE = "erasure_airflow_up"  # on the local Postgres, when it answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make up", description=__doc__)
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("ERASURE_UP_PORT", DEFAULT_PORT)),
        help=f"Airflow's port on 127.0.0.1 (default {DEFAULT_PORT}; a free one if taken)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="forget the previous state (Airflow DB, OpenBao data, demo estate) first",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local (default: the LocalExecutor, erasure_airflow/patches/executor.py) or "
        "celery (the chart's: two Celery workers of four slots, the local Redis as broker)",
    )
    args = parser.parse_args(argv)
    if args.fresh:
        for path in (PATHS.airflow_home, PATHS.openbao_dir, PATHS.estate_dir):
            shutil.rmtree(path, ignore_errors=True)
        forget_metadata_db(METADATA_DATABASE)

    stack = Stack(
        PATHS, port=args.port, metadata_database=METADATA_DATABASE, executor=args.executor
    )
    if stack.ports.api != args.port:
        print(f"Port {args.port} is taken: using {stack.ports.api}.", flush=True)
    print(
        f"Starting Airflow in {PATHS.airflow_home} (log: {stack.log_path}), "
        f"OpenBao in {PATHS.openbao_dir} ...",
        flush=True,
    )

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the stack like Ctrl-C does

    signal.signal(signal.SIGTERM, terminate)
    started = time.monotonic()
    try:
        try:
            stack.start()
        except StackError as exc:
            print(f"make up: {exc}", file=sys.stderr)
            return 1
        _print_ready(stack, time.monotonic() - started)
        assert stack.process is not None
        while stack.process.poll() is None:
            time.sleep(1)
        print(
            f"Airflow exited ({stack.process.returncode}); see {stack.log_path}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("\nStopping Airflow and OpenBao ...", flush=True)
        stack.stop()
        print("Stopped.", flush=True)
        return 0
    finally:
        stack.stop()  # a no-op once stopped


def _print_ready(stack: Stack, seconds: float) -> None:
    estate = "built" if stack.estate_built else "kept from the last run"
    print(f"\nAirflow is up at {stack.base_url} ({seconds:.0f} s).\n")
    print("Logins (FAB auth manager, the chart's roles; passwords kept in")
    print(f"  {stack.paths.airflow_home}/{PASSWORDS_FILE}):")
    for user, role in USERS.items():
        note = "  (the tasks' service account)" if user == TASKS_USER else ""
        print(f"  {user:14} {role:12} {stack.passwords.get(user, '?')}{note}")
    print(f"\nDemo estate {estate} in {stack.paths.estate_dir}; OpenBao at {stack.bao.address}.")
    if stack.metadata is not None:
        print(f"Airflow's metadata DB: {stack.metadata.describe()}.")
    print(
        f"The DPO's desk: {stack.base_url}/erasure/desk (log in as dpo); submit a request at "
        f"{stack.base_url}/erasure/requests/new, e.g. identifier type {DEMO_SUBJECT[0]}, "
        f"identifier {DEMO_SUBJECT[1]}.\n"
        f"Auditors: {stack.base_url}/erasure/records (log in as auditor)."
    )
    print(
        "\nCtrl-C stops Airflow and OpenBao; `make up` again resumes (--fresh starts over).",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
