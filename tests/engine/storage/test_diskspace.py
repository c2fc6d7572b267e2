"""When the ingress calls the disk too full, and when it takes input again (pure logic)."""
from __future__ import annotations

import errno

from engine.storage.diskspace import SHARED_FS, DiskSpace, SpaceMark, fs_type, is_disk_full, is_shared_fs

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


MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:50 / /shared rw,relatime shared:1 - nfs4 srv:/export rw,vers=4.2
41 40 0:51 / /shared/local\\040disk rw - xfs /dev/vdb rw
42 27 0:52 / /mnt/ssh rw - fuse.sshfs user@host: rw
"""


def test_the_file_system_type_is_the_deepest_mount_holding_the_path():
    assert fs_type("/shared/ms/ingress", MOUNTINFO) == "nfs4"
    assert fs_type("/shared/local disk/ms", MOUNTINFO) == "xfs"      # a mount inside the share, escaped name
    assert fs_type("/sharedness", MOUNTINFO) == "ext4"               # a prefix of the name is not inside
    assert fs_type("/mnt/ssh/x", MOUNTINFO) == "fuse.sshfs"
    assert fs_type("/", MOUNTINFO) == "ext4"
    assert fs_type("/x", "") == ""


def test_only_a_local_file_system_counts_as_unshared(tmp_path):
    assert fs_type(tmp_path)                                          # this machine's mounts are readable
    assert is_shared_fs(tmp_path) is (fs_type(tmp_path).split(".")[0] in SHARED_FS)
    assert "nfs4" in SHARED_FS and "fuse" in SHARED_FS and "ext4" not in SHARED_FS
