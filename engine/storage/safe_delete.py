"""Delete inside the state folder without ever following a link out of it.

A symlink planted where a batch folder or a segment belongs would otherwise lead a
deletion to files outside the state folder; here a link is always removed as a link.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def remove_tree(path: str | os.PathLike) -> int:
    """Remove a file, a link or a folder tree, never following a link; return the bytes freed.

    Raises OSError if something could not be removed (the caller keeps it to retry); a
    path that is gone already frees 0.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    freed = st.st_blocks * 512
    if stat.S_ISDIR(st.st_mode):
        with os.scandir(path) as it:
            entries = [e.path for e in it]
        freed += sum(remove_tree(e) for e in entries)
        os.rmdir(path)
    else:
        os.unlink(path)                      # a link goes as a link: its target stays
    return freed


def linked_folders(paths: list[Path]) -> list[Path]:
    """The managed folders among `paths` that are symbolic links (a deletion would follow them)."""
    return [p for p in paths if p.is_symlink()]


def refuse_linked_folders(paths: list[Path]) -> None:
    """Raise ValueError naming any managed folder that is a link: retention deletes inside them.

    A mount point is fine (it is a real folder); a link may lead outside the state folder.
    """
    if bad := linked_folders(paths):
        raise ValueError(f"{bad[0]} is a link to {os.readlink(bad[0])}: retention deletes inside the "
                         "state folder's managed folders, so they must be real folders (mount a "
                         "file system there instead of linking)")
