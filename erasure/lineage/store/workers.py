"""Event files decoded, hashed and validated in worker processes beside the writer.

Reading a day of runs (decoding, the content hash, validation) cost as much CPU as storing
and projecting it, and one process did both on one core. For a JSON-lines file of more
than one batch, the ingesting process now only reads lines and writes the store: forked
workers judge each batch of lines (`judge_lines`) and hand back each event reduced to what
projection reads (`openlineage.transferable`: a few strings and the link facets' text).
A verdict is a function of the line alone, and batches are written in file order, as
read in one process: the same ids, rows and projection, the same quarantine reasons.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Generator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from erasure.errors import LineageError
from erasure.lineage.openlineage import (
    RunEvent,
    decoded_elements,
    decoded_line,
    event_lines,
    event_text,
    transferable,
)
from erasure.lineage.store.events import canonical_json, event_row
from erasure.lineage.store.intake import Incoming, incoming

MAX_DEFAULT_WORKERS = 4
PIECES = 4  # parts of a batch judged apart


def judged_batches(path: Path, size: int, workers: int) -> Generator[list[Incoming]] | None:
    """The file's batches judged in `workers` forked processes, in file order; None when the
    file is not JSON lines, is at most one batch, or processes cannot be forked here (it is
    then read in this process)."""
    if workers < 1 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    lines = event_lines(path)
    if lines is None:
        return None
    first = list(islice(lines, size))
    following = list(islice(lines, size))
    if not following:
        lines.close()
        return None
    return _judged(path, [first, following], lines, size, workers)


def _judged(
    path: Path,
    head: list[list[tuple[int, str]]],
    lines: Generator[tuple[int, str]],
    size: int,
    workers: int,
) -> Generator[list[Incoming]]:
    # Forked before the pool starts its own thread (it does, with fork); the children never
    # touch the parent's database connections, and leave with os._exit.
    context = multiprocessing.get_context("fork")
    # Each batch goes to the workers in PIECES parts: the writer waits for a quarter of a
    # batch to be judged before it starts, not for a whole one, and the workers share the
    # last batch of a file instead of one judging it alone.
    parts = max(1, min(PIECES, size))
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_started) as pool:
        pending: deque[list[tuple[Future[list[Incoming]], list[tuple[int, str]]]]] = deque()
        batches = iter(head)

        def submit() -> None:
            batch = next(batches, None) or list(islice(lines, size))
            if batch:
                step = -(-len(batch) // parts)
                pieces = [batch[k : k + step] for k in range(0, len(batch), step)]
                pending.append([(pool.submit(judge_lines, str(path), p), p) for p in pieces])

        try:
            for _ in range(workers + 1):  # one batch ahead of every worker
                submit()
            while pending:
                judged: list[Incoming] = []
                for future, sent in pending.popleft():
                    try:
                        piece = future.result()
                    except BrokenProcessPool:
                        raise LineageError(
                            f"{path}: a worker process reading it ended abruptly (out of "
                            "memory, or killed); the batches before it are stored: run the "
                            "ingest again (stored events are skipped; malformed lines are "
                            "quarantined again), with --workers 0 to read in one process"
                        ) from None
                    for item, (_, line) in zip(piece, sent, strict=True):
                        item.text = item.text or line  # sent back only when not the line
                    judged += piece
                submit()
                yield judged
        finally:
            for group in pending:
                for future, _ in group:
                    future.cancel()
            lines.close()


def default_workers() -> int:
    """One worker per core this process may run on, at most MAX_DEFAULT_WORKERS: the writer
    is the bound beyond a few (and a container's CPU limit is not its host's core count)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(cores, MAX_DEFAULT_WORKERS)


def _worker_started() -> None:
    gc.disable()  # as ingest pauses it: decoding makes cyclic garbage the process never keeps
    # Ctrl-C is the ingesting process's to handle: it stops handing out batches and waits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def judge_lines(path: str, lines: list[tuple[int, str]]) -> list[Incoming]:
    """A batch of numbered lines judged: each its content hash and event (reduced to what
    projection reads), or why it is refused, exactly as `LineageStore.ingest` would. Each
    item's text is "" when it is its line's."""
    out = []
    checked_at = datetime.now(UTC)  # eventTime may be at most a day ahead of it
    elements = decoded_elements(Path(path), (decoded_line(n, line) for n, line in lines))
    for element, (_, line) in zip(elements, lines, strict=True):
        item = incoming(element, path)
        if item.identity is not None:
            item.validate()
        if isinstance(item.event, RunEvent):
            try:
                event_row(item.event, checked_at, item.text, identity=item.identity)
            except LineageError as exc:
                item.error, item.text = str(exc), canonical_json(item.event.raw)
                item.event = None
            else:
                item.text = item.text or event_text(item.event)
                item.event = transferable(item.event)
        if item.text == line:
            item.text = ""  # the writer has the line: not sent back
        out.append(item)
    return out
