"""Delete inside the state folder without ever following a link out of it: the one path.

A symlink planted where a batch folder, a segment or a spool file belongs would otherwise
lead a deletion to files outside the state folder; here a link is always removed as a
link, and a folder reached through a link is not entered. Every delete the product makes
(retention, the spools, snapshots, temp and run folders) goes through here: a test holds it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class LinkOnPath(OSError):
    """A deletion refused: a symbolic link lies between the managed folder and the path."""


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


def try_remove_tree(path: str | os.PathLike) -> OSError | None:
    """`remove_tree` for clean-ups that must not raise: return the error (the caller says it), or None."""
    try:
        remove_tree(path)
    except OSError as e:
        return e
    return None


def remove_in(root: str | os.PathLike, path: str | os.PathLike) -> int:
    """Remove `path` (a file, a link as a link, or a tree) inside the managed folder `root`; return the bytes freed.

    Raises `LinkOnPath` (an OSError) when a link lies between `root` and `path`'s folder:
    a folder someone replaced by a link leads outside, and nothing there is ours.
    """
    path = Path(path)
    if not link_free(root, path.parent):
        raise LinkOnPath(errno.ELOOP, f"a link lies between {root} and it: not deleted", str(path))
    return remove_tree(path)


def remove_file_in(root: str | os.PathLike, path: str | os.PathLike) -> int:
    """Remove one file (or link) inside `root` as `remove_in` does; return its size in bytes (0 if gone)."""
    try:
        size = os.lstat(path).st_size
    except FileNotFoundError:
        return 0
    remove_in(root, path)
    return size


def link_free(root: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether `path` is `root` or under it with no symbolic link from `root` down to it (itself included).

    A folder someone else can write (a shared spool) may hold a link where a folder
    belongs; what lies behind it is not ours to read or delete.
    """
    root, path = Path(root), Path(path)
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    here = root
    for part in parts:
        if part in ("", ".", ".."):
            return False
        here = here / part
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return False
        except FileNotFoundError:
            return True                      # nothing there (yet): nothing to follow
    return True


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
