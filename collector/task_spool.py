"""The task-sample spool: where Spark tasks leave step samples for the driver, both ways.

The only module that knows the layout. A task of a monitored streaming query appends its
samples to one file per task attempt under its batch's folder; the driver reads the folder
once Spark reports the batch committed and removes it, so each committed batch counts once::

    <spool_dir>/<query id>/<batch id>/<run>~<stage>~<partition>~<task attempt id>~<attempt>.s1
    <spool_dir>/_unbatched/<run>~<stage>~<partition>~<task attempt id>~<attempt>~<pid>-<n>.s1
    <spool_dir>/_skipped/<host>-<pid>            writes a worker skipped (count, one line)

`<run>` is the query run (Spark's job group, else the application id), so a batch rerun
after a restart (same query and batch id, stage and task ids counting from 0 again) is told
apart from the dead run's leftovers: the run whose files are newest wins. Within it, for each
(stage, partition) only the highest task attempt id is kept: a retried task or a rerun stage
gets a higher one and rewrote every row, so a failed attempt's partial samples are never
counted. A file is lines: a sample as `collector.samples.encode_samples` writes it (a JSON
array), or the rows a step could not time (a JSON object: step, nulls, negative). Files of
tasks outside a streaming query (no batch id) are written whole under another name and then
renamed into `_unbatched/`, as the driver ships them on sight (at least once).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import stat
import time
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Iterable, Mapping

from collector.names import to_name
from collector.safe_delete import link_free, remove_tree
from collector.samples import StepSample, decode_samples, encode_samples
from collector.settings import default_state_dir

log = logging.getLogger(__name__)

SUFFIX = ".s1"
UNBATCHED = "_unbatched"
SKIPPED = "_skipped"
SEP = "~"
#: A query folder holding this many batch folders gets no more: its driver is
#: not collecting (dead or not monitoring), and the disk must not fill.
MAX_BATCH_FOLDERS = 10_000

_seq = count()
_warned: set[str] = set()


@dataclass(frozen=True)
class TaskAttempt:
    """Where a task's samples go: its query and batch (None outside a query) and attempt."""
    query_id: str | None
    batch_id: int | None
    run: str
    stage: int
    partition: int
    task_attempt_id: int
    attempt: int = 0


@dataclass(frozen=True)
class Uncounted:
    """Rows a step saw but could not time: null timestamps, or ones in the future (clock skew)."""
    step: str
    nulls: int = 0
    negative: int = 0


@dataclass(frozen=True)
class SpoolBatch:
    """What one batch's folder held: samples of the newest attempts, and what was left out."""
    samples: tuple[StepSample, ...] = ()
    uncounted: Mapping[str, Uncounted] = field(default_factory=dict)
    superseded_files: int = 0       # older attempts' and dead runs' files, not counted
    unreadable: int = 0             # files or lines that could not be read, skipped


def default_spool_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Return `<MS_STATE_DIR>/task-samples`, the spool both tasks and driver use by default."""
    return default_state_dir(environ) / "task-samples"


def _file_name(task: TaskAttempt) -> str:
    parts = [to_name(task.run, "run"), str(int(task.stage)), str(int(task.partition)),
             str(int(task.task_attempt_id)), str(int(task.attempt))]
    return SEP.join(parts) + SUFFIX


def _batch_dir(spool_dir: Path, query_id: str, batch_id: int) -> Path:
    return Path(spool_dir) / to_name(query_id, "query") / str(int(batch_id))


def encode_lines(samples: Iterable[StepSample], uncounted: Iterable[Uncounted] = ()) -> bytes:
    """Encode one write: the samples, then the steps' uncounted rows, newline-terminated."""
    lines = [encode_samples([s]) for s in samples]
    lines += [json.dumps({"step": u.step, "nulls": u.nulls, "negative": u.negative}).encode()
              for u in uncounted if u.nulls or u.negative]
    return b"".join(line + b"\n" for line in lines)


def _note_skip(spool_dir: Path, why: str) -> None:
    """Count a skipped write in this worker's stats file; log the first one of each kind."""
    try:
        stats = Path(spool_dir) / SKIPPED / f"{to_name(socket.gethostname(), 'host')}-{os.getpid()}"
        stats.parent.mkdir(parents=True, exist_ok=True)
        try:
            n = int(stats.read_text().strip() or 0)
        except (OSError, ValueError):
            n = 0
        stats.write_text(f"{n + 1}\n")
    except OSError:
        pass
    if why not in _warned:
        _warned.add(why)
        log.warning("task samples not written (%s); further skips are counted in %s/%s",
                    why, spool_dir, SKIPPED)


def skipped_writes(spool_dir: Path) -> int:
    """Return how many task writes were skipped (bound reached, disk error), all workers."""
    total = 0
    folder = Path(spool_dir) / SKIPPED
    for f in folder.glob("*") if folder.is_dir() else ():
        try:
            total += int(f.read_text().strip() or 0)
        except (OSError, ValueError):
            pass
    return total


def write_task_samples(spool_dir: Path, task: TaskAttempt, samples: Iterable[StepSample],
                       uncounted: Iterable[Uncounted] = (),
                       max_batches: int = MAX_BATCH_FOLDERS) -> Path | None:
    """Append a task's samples to its attempt's file; None if nothing or skipped (counted).

    Never raises: a sample that cannot be written must not fail the user's task.
    """
    data = encode_lines(samples, uncounted)
    if not data:
        return None
    spool_dir = Path(spool_dir)
    try:
        if task.query_id is None or task.batch_id is None:
            folder = spool_dir / UNBATCHED
            folder.mkdir(parents=True, exist_ok=True)
            name = _file_name(task)[:-len(SUFFIX)] + f"{SEP}{os.getpid()}-{next(_seq)}{SUFFIX}"
            tmp = folder / f".{name}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, folder / name)     # the driver may read the folder at any time
            return folder / name
        folder = _batch_dir(spool_dir, task.query_id, task.batch_id)
        if not folder.is_dir():
            query_dir = folder.parent
            if query_dir.is_dir() and _count_dirs(query_dir, max_batches) >= max_batches:
                _note_skip(spool_dir, f"{query_dir} holds {max_batches} batch folders")
                return None
            folder.mkdir(parents=True, exist_ok=True)
        path = folder / _file_name(task)
        # One write per flush: the batch is read only after its tasks ended.
        with open(path, "ab") as f:
            f.write(data)
        return path
    except OSError as e:
        _note_skip(spool_dir, f"{type(e).__name__}: {e}")
        return None


def _count_dirs(folder: Path, stop: int) -> int:
    n = 0
    with os.scandir(folder) as it:
        for entry in it:
            n += 1
            if n >= stop:
                break
    return n


@dataclass(frozen=True)
class _Entry:
    path: Path
    run: str
    key: tuple[int, int]            # stage, partition
    task_attempt_id: int
    mtime: float


def _parse_name(path: Path) -> _Entry | None:
    if not path.name.endswith(SUFFIX) or path.name.startswith("."):
        return None
    parts = path.name[:-len(SUFFIX)].split(SEP)
    if len(parts) not in (5, 6):
        return None
    try:
        stage, partition, tid = int(parts[1]), int(parts[2]), int(parts[3])
        mtime = path.stat().st_mtime
    except (ValueError, OSError):
        return None
    return _Entry(path, parts[0], (stage, partition), tid, mtime)


#: A sample is dated when its task ended: one older than the raw retention (7 days) or more
#: than 5 min ahead of this clock is no task's, and would make InfluxDB open a shard for its day.
MAX_AGE_NS = 7 * 86400 * 1_000_000_000
MAX_AHEAD_NS = 300 * 1_000_000_000


def _read_file(path: Path, samples: list, uncounted: dict[str, Uncounted]) -> int:
    """Add a file's samples and uncounted rows; return how many lines could not be read."""
    try:                            # a link planted in a shared spool is not followed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    except OSError:
        return 1
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            if line.lstrip().startswith(b"{"):
                d = json.loads(line)
                u = Uncounted(str(d["step"]), int(d["nulls"]), int(d["negative"]))
                old = uncounted.get(u.step, Uncounted(u.step))
                uncounted[u.step] = Uncounted(u.step, old.nulls + u.nulls, old.negative + u.negative)
            else:
                decoded = decode_samples(line)
                now = time.time_ns()
                if any(not now - MAX_AGE_NS <= x.ts_ns <= now + MAX_AHEAD_NS for x in decoded):
                    raise ValueError("a sample dated outside the raw retention or ahead of this clock")
                samples.extend(decoded)
        except Exception:           # hostile or torn line: skip it, count it, read on
            bad += 1
    return bad


def read_folder(folder: Path, newest_only: bool = True) -> SpoolBatch:
    """Read a batch folder: for each (stage, partition) the newest attempt of the newest run."""
    try:
        paths = [p for p in Path(folder).iterdir() if p.is_file()]
    except OSError:
        return SpoolBatch()
    entries, unreadable = [], 0
    for p in paths:
        e = _parse_name(p)
        if e is None:
            unreadable += not p.name.startswith(".")
        else:
            entries.append(e)
    keep = entries
    if newest_only and entries:
        runs: dict[str, float] = {}
        for e in entries:
            runs[e.run] = max(runs.get(e.run, 0.0), e.mtime)
        run = max(runs, key=lambda r: runs[r])
        best: dict[tuple[int, int], _Entry] = {}
        for e in entries:
            if e.run == run and (e.key not in best or e.task_attempt_id > best[e.key].task_attempt_id):
                best[e.key] = e
        keep = sorted(best.values(), key=lambda e: e.key)
    samples: list[StepSample] = []
    uncounted: dict[str, Uncounted] = {}
    for e in keep:
        unreadable += _read_file(e.path, samples, uncounted)
    return SpoolBatch(tuple(samples), uncounted, len(entries) - len(keep), unreadable)


def collect_batch_figures(spool_dir: Path, query_id: str, batch_id: int) -> SpoolBatch:
    """Read a committed batch's samples (newest attempts only) and remove its folder."""
    folder = _batch_dir(Path(spool_dir), query_id, batch_id)
    if not link_free(spool_dir, folder) or not folder.is_dir():
        return SpoolBatch()             # a linked query or batch folder is never entered (sweep drops the link)
    batch = read_folder(folder)
    try:
        remove_tree(folder)
    except OSError as e:
        log.warning("task samples of %s not removed (%s); the sweep retries", folder, e)
    if batch.unreadable:
        log.warning("task samples of %s: %d unreadable files or lines skipped", folder, batch.unreadable)
    return batch


def collect_batch(spool_dir: Path, query_id: str, batch_id: int) -> list[StepSample]:
    """Return a committed batch's step samples, each task's newest attempt once; remove them."""
    return list(collect_batch_figures(spool_dir, query_id, batch_id).samples)


def collect_unbatched(spool_dir: Path) -> dict[str, SpoolBatch]:
    """Read and remove the samples of tasks outside any streaming query (at least once), by run.

    The run is the one in each file's name (the task's job group, else its application), so
    whichever monitor on the machine ships them, they count under their own run.
    """
    folder = Path(spool_dir) / UNBATCHED
    if not link_free(spool_dir, folder):
        return {}
    try:
        paths = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    except OSError:
        return {}
    by_run: dict[str, tuple[list[StepSample], dict[str, Uncounted], list[int]]] = {}
    for p in paths:
        e = _parse_name(p)
        samples, uncounted, unreadable = by_run.setdefault(e.run if e else "", ([], {}, [0]))
        unreadable[0] += _read_file(p, samples, uncounted) if e else 1
        try:
            remove_tree(p)
        except OSError:
            pass
    return {run: SpoolBatch(tuple(samples), uncounted, 0, unreadable[0])
            for run, (samples, uncounted, unreadable) in by_run.items()}


def sweep(spool_dir: Path, older_than_s: float, now: float | None = None) -> int:
    """Remove batch folders (and unbatched files) untouched for `older_than_s`; return how many.

    What a failed query or a driver that stopped watching left behind: its batches were
    never reported committed, so their samples are dropped, never counted.
    """
    cutoff = (time.time() if now is None else now) - older_than_s
    spool_dir, removed = Path(spool_dir), 0
    try:
        entries = [q for q in spool_dir.iterdir() if q.name != SKIPPED]
    except OSError:
        return 0
    queries = []
    for q in entries:
        try:
            st = os.lstat(q)
            if stat.S_ISDIR(st.st_mode):
                queries.append(q)
            elif st.st_mtime < cutoff:      # a link or a stray file where a query folder belongs
                removed += remove_tree(q) >= 0
        except OSError:
            continue
    for q in queries:
        try:
            children = list(q.iterdir())
        except OSError:
            continue
        for child in children:
            try:
                if os.lstat(child).st_mtime >= cutoff:
                    continue
                remove_tree(child)          # a link goes as a link; a folder's links likewise
                removed += 1
            except OSError:
                continue
        if q.name != UNBATCHED:
            try:
                q.rmdir()               # only when empty
            except OSError:
                pass
    return removed
