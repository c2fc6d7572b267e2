"""A Python worker's memory across batches: one kept read buffer, freed memory kept mapped,
and the imported modules' objects out of the garbage collector's way.

A batch's arrays are tens of MB (500,000 records: 32 MB read, ~20 MB decoded, as much
again in the rule). Fresh memory costs a page fault per page on first touch, and on this
VM a huge page's first touch cost 50-65 ms per 32 MB: a batch in fresh memory took 2-3×
as long in its read and decode as one in memory touched before (docs/PERFORMANCE.md,
"Design decisions": "Worker memory kept between batches").

- The read buffer lives here, in a module the worker imports, so every task of the
  worker finds the same one. A module-level object referenced from the job's closure
  would not do: cloudpickle ships a closure's globals by value, so each task unpickled
  an empty buffer of its own.
- glibc returns freed heap memory to the OS above a trim threshold and puts large blocks
  in fresh mappings; `keep_freed_memory` makes it keep both, so a batch reuses what the
  previous one touched. The worker's memory then stays at its largest batch's, bounded
  by `--max-rows-per-batch`.
- PySpark's daemon runs a full `gc.collect()` in a reused worker after every task, and
  with pyarrow, pandas and numpy imported each took 10-50 ms (535 collections in 30 s at
  50k events/s, timed with `gc.callbacks`): a batch whose task came within that time
  waited for it. `prepare` freezes what the worker holds once it has imported the job
  (`gc.freeze`), so later collections only look at objects made since.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc

import numpy as np

from engine.formats.log import RECORD_BYTES

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20     # glibc's upper bound on 64-bit; larger blocks are always mapped
_TRIM_THRESHOLD = 1 << 30          # give memory back only above 1 GiB free at the heap's top

_buffer = np.empty(0, dtype=np.uint8)
_prepared = False


def prepare() -> None:
    """Set up this worker for batches, once: glibc keeps freed memory, imports are frozen.

    Called at the start of every task (after its function was unpickled, so the job's
    modules are imported); only the first call in a worker does anything.
    """
    global _prepared
    if _prepared:
        return
    keep_freed_memory()
    gc.collect()               # what is garbage now would stay for good once frozen
    gc.freeze()
    _prepared = True


def read_buffer(n_bytes: int) -> np.ndarray:
    """Return this worker's read buffer, at least `n_bytes` long (grown, never shrunk)."""
    global _buffer
    if _buffer.size < n_bytes:
        _buffer = np.empty(n_bytes, dtype=np.uint8)
    return _buffer


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory mapped for reuse; False where that is not glibc."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def warm(records: int) -> None:
    """Prepare the worker and map its read buffer for batches of `records` (the warm-up job)."""
    prepare()
    read_buffer(records * RECORD_BYTES).fill(0)
