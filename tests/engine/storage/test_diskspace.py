"""When the ingress calls the disk too full, and when it takes input again (pure logic)."""
from __future__ import annotations

import errno

from engine.storage.diskspace import DiskSpace, SpaceMark, is_disk_full

GiB = 1 << 30


def test_the_mark_is_the_smaller_of_bytes_and_percent():
    mark = SpaceMark(min_free_bytes=GiB, min_free_percent=5)
    assert mark.mark(DiskSpace(0, 20_000 * GiB)) == GiB                 # 5 % would be 1 TB
    assert mark.mark(DiskSpace(0, 10 * GiB)) == 10 * GiB // 20          # 1 GiB would be 10 %
    assert SpaceMark(0, 5).mark(DiskSpace(0, 10 * GiB)) == 0            # either at 0: off
    assert not SpaceMark(0, 5).low(DiskSpace(0, 10 * GiB))


def test_resume_needs_twice_the_mark_and_after_a_failure_real_room():
    mark, total = SpaceMark(GiB, 5), 100 * GiB
    assert mark.low(DiskSpace(GiB - 1, total)) and not mark.low(DiskSpace(GiB, total))
    assert not mark.recovered(DiskSpace(2 * GiB - 1, total), after_failure=False)
    assert mark.recovered(DiskSpace(2 * GiB, total), after_failure=False)
    off = SpaceMark(0, 0)                                                 # no mark: a failed write alone
    assert off.recovered(DiskSpace(1, total), after_failure=False)
    assert not off.recovered(DiskSpace(1 << 20, total), after_failure=True)
    assert off.recovered(DiskSpace(64 << 20, total), after_failure=True)
    assert off.recovered(DiskSpace(4 << 20, 32 << 20), after_failure=True)   # 10 % of a small disk


def test_disk_full_is_found_in_causes_and_in_spark_text():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("batch failed") from e
    except RuntimeError as e:
        assert is_disk_full(e)
    assert is_disk_full(Exception("PythonException: ... OSError: [Errno 28] No space left on device"))
    assert not is_disk_full(OSError(errno.ECONNRESET, "reset"))
