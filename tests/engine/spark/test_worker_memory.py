"""A Python worker keeps one read buffer across batches, and glibc keeps the memory batches free."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from pyspark import cloudpickle

from engine.spark import worker_memory
from engine.spark.job import make_check_market_data


def _closure_functions(f):
    """`f` and the functions in its closure cells, recursively."""
    seen, todo = [], [f]
    while todo:
        g = todo.pop()
        seen.append(g)
        for cell in g.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:              # an empty cell
                continue
            if hasattr(value, "__code__"):
                todo.append(value)
    return seen


def test_the_shipped_task_function_reaches_the_workers_one_buffer(tmp_path):
    """cloudpickle ships the job's closure by value: its buffer must still be the module's, not a copy."""
    f = make_check_market_data(str(tmp_path / "log"), str(tmp_path / "out"), str(tmp_path / "state"), 1)
    shipped = cloudpickle.loads(cloudpickle.dumps(f))          # what each task unpickles
    users = [g for g in _closure_functions(shipped) if "worker_memory" in g.__code__.co_names]
    assert users, "the task function no longer reads through worker_memory"
    for g in users:
        assert g.__globals__["worker_memory"] is worker_memory
    assert worker_memory.read_buffer(4096) is worker_memory.read_buffer(1024)


def _buffer_address(batches):
    import os

    from engine.spark import worker_memory as wm
    for b in batches:
        before = wm.read_buffer(0).size            # what the worker's earlier jobs left
        yield b.__class__.from_pydict({"pid": [os.getpid()], "before": [before],
                                       "address": [wm.read_buffer(1 << 20).ctypes.data]})


def test_a_reused_worker_reads_every_batch_into_the_same_buffer(spark):
    """Jobs on a reused worker find the buffer its first job made (a function shipped by value).

    The shared session may hold several idle workers, which Spark hands out in turn: run
    enough jobs that some worker runs more than one, and hold every worker to one buffer.
    """
    seen: dict[int, set[int]] = {}
    runs: dict[int, int] = {}
    for _ in range(12):
        for r in spark.range(0, 1, 1, 1).mapInArrow(_buffer_address, "pid long, before long, address long").collect():
            if runs.get(r.pid):
                assert r.before >= 1 << 20, "a reused worker's buffer was empty again"
            seen.setdefault(r.pid, set()).add(r.address)
            runs[r.pid] = runs.get(r.pid, 0) + 1
    assert max(runs.values()) > 1, f"no worker was reused (spark.python.worker.reuse): {runs}"
    assert all(len(addresses) == 1 for addresses in seen.values()), seen


def test_freed_memory_is_kept_for_the_next_batch():
    """After keep_freed_memory, a freed 20 MB array's pages serve the next one: no fresh mapping."""
    script = textwrap.dedent("""
        import numpy as np
        from engine.spark import worker_memory
        assert worker_memory.keep_freed_memory()
        addresses = []
        for _ in range(3):
            a = np.ones(20 << 20, np.uint8)
            addresses.append(a.ctypes.data)
            del a
        print(len(set(addresses)))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1", out


def _freeze_count(batches):
    import gc

    from engine.spark import worker_memory as wm
    for b in batches:
        wm.prepare()
        yield b.__class__.from_pydict({"frozen": [gc.get_freeze_count()]})


def test_a_prepared_spark_worker_has_its_imports_frozen(spark):
    """PySpark's daemon collects garbage after every task: a prepared worker's imports are frozen."""
    [r] = spark.range(0, 1, 1, 1).mapInArrow(_freeze_count, "frozen long").collect()
    assert r.frozen > 10_000, r                  # pyarrow, numpy and the job's modules: tens of thousands


def test_after_prepare_a_collection_walks_only_what_came_since():
    """In a process that imported the job (as a worker has), prepare leaves little for gc.collect."""
    script = textwrap.dedent("""
        import gc
        import pyarrow, engine.spark.job
        from engine.spark import worker_memory
        before = len(gc.get_objects())
        worker_memory.prepare()
        worker_memory.prepare()                  # once per worker: the second call does nothing
        print(before, gc.get_freeze_count(), len(gc.get_objects()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, frozen, tracked = map(int, out.stdout.split())
    assert frozen > 10_000 and frozen >= before * 0.9, out.stdout
    assert tracked < 100, out.stdout
