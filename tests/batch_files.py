"""Test helpers over batch folders and result frames (engine/formats/batch.py, result_frames.py)."""
from __future__ import annotations

import os

import numpy as np

from engine.formats.batch import ShardFigures, ShardOutput


def write_shard_results(out_dir: str | os.PathLike, batch: int, shard: int, frames: bytes, seqs: bytes,
                        figures: ShardFigures | None = None) -> None:
    """Write one shard's output of `batch` in one call: `frames`, their `seqs` keys, its `figures`."""
    with ShardOutput(out_dir, batch, shard) as out:
        out.write_results(frames, seqs)
        if figures is not None:
            out.write_figures(figures)


def result_tuples(frames: np.ndarray) -> list[tuple]:
    """Turn result frames into comparable tuples without the timestamp."""
    return [(int(r["side"]), int(r["account"]), bytes(r["order_id"]), bytes(r["symbol"]),
             float(r["qty"]), float(r["price"]), float(r["bid"]), float(r["offer"])) for r in frames]
