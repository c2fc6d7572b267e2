"""The ingress log on disk: appends, group commits, reads into a buffer, rollback to `head`."""
from __future__ import annotations

import numpy as np
import pytest

from engine.formats.log import LogReader, LogWriter, read_head
from tests.tmpfs import mounted_tmpfs


def test_log_rollback_truncates_to_head_and_drops_later_segments(tmp_path):
    w = LogWriter(tmp_path, segment_records=100, fsync=False)
    pay = np.full((150, 42), 7, np.uint8)
    w.append(pay, 1)
    w.commit()
    w.append(pay, 2)                          # into segments 100 and 200, never committed
    assert sorted(p.name for p in tmp_path.glob("seg-*")) == [
        "seg-00000000000000000000.log", "seg-00000000000000000100.log", "seg-00000000000000000200.log"]
    assert w.rollback() == 150 and w.size == 150
    assert sorted(p.stat().st_size for p in tmp_path.glob("seg-*")) == [50 * 64, 100 * 64]
    w.append(pay[:10], 3)
    assert w.commit() == 160 == read_head(tmp_path)
    w.close()
    assert LogWriter(tmp_path, segment_records=100).head == 160      # recovery agrees


def test_log_read_into_a_buffer_across_segments_gives_a_view_of_it(tmp_path):
    w = LogWriter(tmp_path, segment_records=100, fsync=False)
    pay = np.arange(250 * 42, dtype=np.uint64).astype(np.uint8).reshape(250, 42)
    w.append(pay, 5)
    w.commit()
    w.close()
    r = LogReader(tmp_path, segment_records=100)
    want = r.read(90, 230)
    buf = np.full(200 * 64, 0xEE, np.uint8)
    got = r.read(90, 230, buf)
    assert np.array_equal(got, want) and np.shares_memory(got, buf)
    assert (buf[140 * 64:] == 0xEE).all()                # only the range's bytes were written
    assert np.array_equal(r.read(0, 10, buf), r.read(0, 10))   # the buffer's next use
    with pytest.raises(ValueError, match="read buffer"):
        r.read(0, 201, buf)


def test_log_appends_through_the_reused_buffer_keep_every_record_whole(tmp_path):
    """Wide rows, then narrower ones, then fewer: each record is its own payload, zero padded."""
    w = LogWriter(tmp_path, segment_records=100, fsync=False)
    wide = np.full((150, 56), 0xAB, np.uint8)
    narrow = np.arange(120 * 42, dtype=np.uint64).astype(np.uint8).reshape(120, 42)
    w.append(wide, 1)
    w.append(narrow, np.arange(120, dtype=np.int64))
    w.append(wide[:3], 9)
    w.commit()
    rec = LogReader(tmp_path, segment_records=100).read(0, 273)
    ts = rec[:, :8].copy().view("<i8").reshape(-1)
    assert (ts[:150] == 1).all() and np.array_equal(ts[150:270], np.arange(120)) and (ts[270:] == 9).all()
    assert (rec[:150, 8:] == 0xAB).all() and (rec[270:, 8:] == 0xAB).all()
    assert np.array_equal(rec[150:270, 8:50], narrow) and (rec[150:270, 50:] == 0).all()


def test_log_write_on_a_full_disk_raises_and_rolls_back(tmp_path):
    with mounted_tmpfs(tmp_path / "disk", 1) as disk:
        w = LogWriter(disk / "log", fsync=True)
        pay = np.full((1000, 42), 1, np.uint8)
        with pytest.raises(OSError):
            for _ in range(100):             # 64 kB a commit: the 1 MiB disk fills
                w.append(pay, 1)
                w.commit()
        head = w.head
        w.rollback()
        seg = disk / "log" / "seg-00000000000000000000.log"
        assert seg.stat().st_size == head * 64 and read_head(disk / "log") == head > 0
