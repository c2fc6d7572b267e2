"""The link-safe delete, for engine's parts: it lives in `collector/safe_delete.py` (the one path)."""
from __future__ import annotations

from collector.safe_delete import link_free, linked_folders, refuse_linked_folders, remove_tree

__all__ = ["link_free", "linked_folders", "refuse_linked_folders", "remove_tree"]
