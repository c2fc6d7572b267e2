"""Whether a whole-path run was exact: its committed results against the rule run in plain Python.

The reference reads the ingress log in arrival order and runs `engine.rule.reference_results`
over it; the committed results, sorted by seq, must be the same tuples at the same seqs,
with no seq twice. Shared by bench/e2e.py's benchmarks and the reliability tests.
`committed_intervals` is the same ground truth for the latency points shipped.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collector.aggregate import IntervalAggregator
from engine.formats.batch import committed_batches
from engine.formats.log import PAYLOAD_OFFSET, RECORD_BYTES, LogReader, read_consumed, read_head
from engine.ingress.stats import read_stats
from engine.formats.stamps import decode_figures
from engine.rule import reference_results
from engine.wire.fixish import NBBO_FIELDS, NBBO_TYPE, ORDER_FIELDS, ORDER_TYPE, Nbbo, Order

REFERENCE_CHUNK = 1 << 20          # log records decoded per step of the reference

# Where the fields of a log record are: ingest ns, then the payload as received.
# (`key` is the symbol's 4 bytes read as one number: a cheap dict key.)
_NBBO_REC = np.dtype({"names": ["type", "key", "bid", "offer"],
                      "formats": ["u1", ">u4", ">f8", ">f8"],
                      "offsets": [PAYLOAD_OFFSET + o for o in (0, NBBO_FIELDS["symbol"], NBBO_FIELDS["bid"],
                                                                NBBO_FIELDS["offer"])],
                      "itemsize": RECORD_BYTES})
_ORDER_REC = np.dtype({"names": ["side", "account", "order_id", "symbol", "key", "qty", "price"],
                       "formats": ["u1", ">u4", ("u1", (6,)), ("u1", (4,)), ">u4", ">f8", ">f8"],
                       "offsets": [PAYLOAD_OFFSET + ORDER_FIELDS[f] for f in
                                   ("side", "account", "order_id", "symbol", "symbol", "qty", "price")],
                       "itemsize": RECORD_BYTES})
RESULT_FIELDS = ("side", "account", "order_id", "symbol", "qty", "price", "bid", "offer")


@dataclass(frozen=True)
class ExactnessFigures:
    """Committed results against the reference rule over the whole ingress log."""
    exact: bool                        # same tuples in seq order, same seqs, no seq twice
    events: int                        # log records checked (the whole log)
    nbbo: int
    orders: int
    expected: int
    committed: int
    duplicate_seqs: int
    seqs_match: bool
    mismatched_rows: int               # rows whose tuple differs (when the counts agree)
    first_difference: str | None
    head: int
    consumed: int
    bad_frames: int                    # set aside by the ingress (a killed sender cuts a frame)
    drain_s: float                     # senders stopped -> job committed the whole log
    reference_s: float


class ReferenceRule:
    """engine/rule.py's `reference_results`, fed log records in arrival order, chunk by chunk.

    Its state carries over between chunks, so a reader can follow a live log (and let
    retention delete what it has read: tests/reliability/test_retention.py): each chunk
    goes to the rule after every symbol's last quote so far, which sets that state again.
    """

    def __init__(self):
        self.last_quote: dict[int, Nbbo] = {}
        self.parts: list[dict[str, np.ndarray]] = []
        self.n_nbbo = self.n_orders = 0

    def feed(self, start: int, rec: np.ndarray) -> None:
        """Run the rule over records `rec` (seq `start` on); keep their expected results."""
        nbbo, order = rec.view(_NBBO_REC).reshape(-1), rec.view(_ORDER_REC).reshape(-1)
        kinds, nbbo_sym, order_sym = nbbo["type"].tolist(), nbbo["key"].tolist(), order["key"].tolist()
        bids, offers = nbbo["bid"].tolist(), nbbo["offer"].tolist()
        n_nbbo, n_orders = kinds.count(NBBO_TYPE), kinds.count(ORDER_TYPE)
        if n_nbbo + n_orders != len(kinds):
            bad = next(i for i, k in enumerate(kinds) if k != NBBO_TYPE and k != ORDER_TYPE)
            raise ValueError(f"log record {start + bad} has message type {kinds[bad]}")
        # A symbol is its 4 bytes as one number; an order's id is its row, so each result
        # names the record it came from (whose own fields the results then take). The
        # records become tuples directly (tuple.__new__: a third of the NamedTuple call).
        make = tuple.__new__
        messages: list[Nbbo | Order] = list(self.last_quote.values())
        messages += [make(Nbbo, (nbbo_sym[i], b"", bids[i], offers[i])) if kind == NBBO_TYPE else
                     make(Order, (0, 0, i, order_sym[i], 0.0, 0.0, b"")) for i, kind in enumerate(kinds)]
        for m in messages[len(messages) - len(kinds):]:
            if type(m) is Nbbo:
                self.last_quote[m.symbol] = m
        self.n_nbbo += n_nbbo
        self.n_orders += n_orders
        results = reference_results(messages)
        rows = np.array([r[2] for r in results], np.int64)
        sel = order[rows]
        part = {f: sel[f] for f in ("side", "account", "order_id", "symbol", "qty", "price")}
        part["seq"] = start + rows
        part["bid"] = np.array([r[6] for r in results], np.float64)
        part["offer"] = np.array([r[7] for r in results], np.float64)
        self.parts.append(part)

    def expected(self) -> dict[str, np.ndarray]:
        """The expected results so far, as columns (seq and RESULT_FIELDS)."""
        if not self.parts:
            return {f: np.empty(0) for f in ("seq", *RESULT_FIELDS)}
        return {f: np.concatenate([p[f] for p in self.parts]) for f in self.parts[0]}


def reference_expected(log_dir: Path, head: int) -> tuple[dict[str, np.ndarray], int, int]:
    """Run the rule in plain Python over log records [0, head) in arrival order.

    Returns the expected results as columns (seq and RESULT_FIELDS), plus the NBBO and
    order counts.
    """
    reader = LogReader(log_dir)
    ref = ReferenceRule()
    for start in range(0, head, REFERENCE_CHUNK):
        ref.feed(start, reader.read(start, min(head, start + REFERENCE_CHUNK)))
    return ref.expected(), ref.n_nbbo, ref.n_orders


def compare_results(expected: dict[str, np.ndarray], frames: np.ndarray,
                    side: np.ndarray) -> tuple[bool, int, bool, int, str | None]:
    """Compare committed results, sorted by seq, with the expected ones.

    Returns (tuples equal, duplicate seqs, seqs equal, mismatched rows, first difference).
    """
    order = np.argsort(side[:, 0], kind="stable")
    got, seq = frames[order], side[order, 0]
    duplicates = int(len(seq) - len(np.unique(seq)))
    exp_seq = expected["seq"]
    if len(got) != len(exp_seq):
        missing = np.setdiff1d(exp_seq, seq)
        extra = np.setdiff1d(seq, exp_seq)
        first = (f"{len(got)} committed vs {len(exp_seq)} expected; {len(missing)} expected seqs missing "
                 f"(first {missing[:3].tolist()}), {len(extra)} unexpected (first {extra[:3].tolist()})")
        return False, duplicates, False, -1, first
    differs = np.zeros(len(got), bool)
    for f in RESULT_FIELDS:
        a, b = got[f], expected[f]
        differs |= (a != b).reshape(len(got), -1).any(axis=1)
    bad = np.flatnonzero(differs)
    seqs_match = bool(np.array_equal(seq, exp_seq))
    first = None
    if len(bad):
        i = int(bad[0])
        first = (f"row {i} (seq {int(seq[i])}): got {[_plain(got[f][i]) for f in RESULT_FIELDS]}, "
                 f"expected {[_plain(expected[f][i]) for f in RESULT_FIELDS]}")
    elif not seqs_match:
        i = int(np.flatnonzero(seq != exp_seq)[0])
        first = f"row {i}: seq {int(seq[i])} committed, {int(exp_seq[i])} expected"
    return len(bad) == 0, duplicates, seqs_match, len(bad), first


def _plain(v):
    return bytes(v).decode("latin-1") if np.ndim(v) else v.item()


def check_exactness(run_dir: Path, frames: np.ndarray, side: np.ndarray, drain_s: float) -> ExactnessFigures:
    """Check the committed results against the reference over the whole ingress log."""
    log_dir = run_dir / "ingress"
    head, consumed = read_head(log_dir), read_consumed(log_dir)
    t0 = time.monotonic()
    print(f"e2e: checking {head:,} logged events against the reference ...", flush=True)
    expected, n_nbbo, n_orders = reference_expected(log_dir, head)
    equal, dups, seqs_match, mismatched, first = compare_results(expected, frames, side)
    st = read_stats(log_dir) or {}
    if consumed != head:
        first = f"the job committed {consumed:,} of {head:,} logged records; {first}"
    return ExactnessFigures(
        exact=equal and dups == 0 and seqs_match and consumed == head,
        events=head, nbbo=n_nbbo, orders=n_orders, expected=len(expected["seq"]), committed=len(frames),
        duplicate_seqs=dups, seqs_match=seqs_match, mismatched_rows=mismatched,
        first_difference=first,
        head=head, consumed=consumed, bad_frames=int(st.get("bad_total", 0)),
        drain_s=round(drain_s, 3), reference_s=round(time.monotonic() - t0, 3))


def committed_intervals(out_dir: Path, run: str) -> Counter:
    """Count of every (interval start ns, step, pipeline, worker) the committed batches hold.

    The ground truth that the `latency` points shipped for `run` must match (tests, benches).
    """
    agg = IntervalAggregator(run)
    for m in committed_batches(out_dir):
        for blob in m.metrics:
            for s in decode_figures(blob):
                agg.add(s)
    return Counter({(ih.start_ns, ih.step, ih.pipeline, ih.worker): ih.hist.total_count
                    for ih in agg.drain(time.time_ns(), final=True)})
