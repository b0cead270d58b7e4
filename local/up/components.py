"""Airflow for the local stack: what `airflow standalone` runs, under the FAB auth manager.

`airflow standalone` forces the simple auth manager, whose roles are fixed; the stack runs
FAB with the chart's roles, as production does. So this script does standalone's job: it
migrates the metadata DB, sets the FAB roles and users (`local.up.fab_setup`), then runs the
scheduler, DAG processor, triggerer and API server (and Celery workers, when the stack runs
the CeleryExecutor) as its children, in its process group
(the stack stops the group). It exits when any component exits, with that component's status.

Run by `local.up.stack` as a script (`python local/up/components.py`), in Airflow's
environment; it imports nothing but the standard library.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
STOP_GRACE_SECONDS = 20


def prepare() -> int:
    """Migrate the metadata DB, then the FAB roles and users; the first failing status."""
    steps = (
        ([AIRFLOW, "db", "migrate"], None),
        ([sys.executable, "-m", "local.up.fab_setup"], REPO),  # -m finds local/ from REPO
    )
    for argv, cwd in steps:
        status = subprocess.call(argv, stdin=subprocess.DEVNULL, cwd=cwd)
        if status != 0:
            print(f"components: `{' '.join(argv[1:])}` failed ({status})", flush=True)
            return status
    return 0


def commands() -> list[tuple[str, list[str]]]:
    """(name, airflow arguments) of each component; with ERASURE_UP_CELERY_WORKERS=N, N Celery
    workers too (the first serves task logs; the others' are on the same disk)."""
    found = [(name, [name]) for name in COMPONENTS]
    workers = int(os.environ.get("ERASURE_UP_CELERY_WORKERS") or 0)
    for i in range(1, workers + 1):
        argv = ["celery", "worker", "--celery-hostname", f"worker{i}@%h"]
        found.append((f"celery worker {i}", argv if i == 1 else [*argv, "--skip-serve-logs"]))
    return found


def run() -> int:
    """Start every component; when one exits, stop the others and return its status."""
    children: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = prepare()
    if status != 0 or stopping:
        return status
    for name, argv in commands():
        children[name] = subprocess.Popen([AIRFLOW, *argv], stdin=subprocess.DEVNULL)
    exited: tuple[str, int] | None = None
    while not stopping and exited is None:
        time.sleep(0.5)
        exited = next(
            ((name, p.returncode) for name, p in children.items() if p.poll() is not None), None
        )
    if exited is not None:
        name, code = exited
        print(f"components: airflow {name} exited ({code}); stopping the rest", flush=True)
        for process in children.values():
            if process.poll() is None:
                process.terminate()
    # Stopped by a signal to the group, the components have it too: a second TERM would make
    # them force their exit, so they get time to stop first.
    for process in children.values():
        try:
            process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
    return exited[1] if exited is not None else 0


if __name__ == "__main__":
    sys.exit(run())
