"""Covering a range with rollups and 1-s points (pure)."""
from collector.query.ranges import TimeRange
from collector.units import NS
from collector.query.resolution import aligned_span, bucket_s, rollups_up_to

H = 3600 * NS


def test_aligned_span_keeps_only_whole_intervals():
    assert aligned_span(TimeRange(10 * NS, 3 * H + 5 * NS), H) == TimeRange(H, 3 * H)
    assert aligned_span(TimeRange(10 * NS, H - 1), H) is None
    assert aligned_span(TimeRange(0, H), H) == TimeRange(0, H)


def test_bucket_lengths_are_stored_lengths():
    assert bucket_s(TimeRange(0, 300 * NS)) == 1
    assert bucket_s(TimeRange(0, H)) == 10
    assert bucket_s(TimeRange(0, 24 * H)) == 600
    assert bucket_s(TimeRange(0, 90 * 24 * H)) == 3600
    assert rollups_up_to(60) == (60, 10) and rollups_up_to(1) == ()


def test_plan_reads_every_length_at_once_and_missing_rollups_go_finer():
    from collector.query.resolution import missing, plan
    rng = TimeRange(10 * NS, 2 * H + 25 * NS)
    reads = plan([(rng, 0)], (3600, 600, 60, 10), settled_ns=10 * H)
    assert [(r.size_s, r.span) for r in reads] == [
        (3600, TimeRange(H, 2 * H)),
        (600, TimeRange(600 * NS, H)),
        (60, TimeRange(60 * NS, 600 * NS)),
        (10, TimeRange(10 * NS, 60 * NS)), (10, TimeRange(2 * H, 2 * H + 20 * NS)),
        (1, TimeRange(2 * H + 20 * NS, 2 * H + 25 * NS))]
    # all there: nothing left; the hour missing (a restart): it is read again from 10 min down
    present = {j: set(range(r.span.start_ns, r.span.end_ns, r.size_s * NS)) for j, r in enumerate(reads[:4])}
    present[3] |= set(range(2 * H, 2 * H + 20 * NS, 10 * NS))
    assert missing(reads, present) == []
    del present[0]
    assert missing(reads, present) == [(TimeRange(H, 2 * H), 1)]
    # rollups still open (ending after `settled`) are not planned: their span goes finer at once
    live = plan([(TimeRange(0, H), 0)], (3600, 600), settled_ns=H - 5 * NS)
    assert [(r.size_s, r.span) for r in live] == [(600, TimeRange(0, H - 600 * NS)),
                                                  (1, TimeRange(H - 600 * NS, H))]
