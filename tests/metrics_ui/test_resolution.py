"""Covering a range with rollups and 1-s points (pure)."""
from metrics_ui.ranges import NS, TimeRange
from metrics_ui.resolution import aligned_span, bucket_s, rollups_up_to, subtract

H = 3600 * NS


def test_aligned_span_keeps_only_whole_intervals():
    assert aligned_span(TimeRange(10 * NS, 3 * H + 5 * NS), H) == TimeRange(H, 3 * H)
    assert aligned_span(TimeRange(10 * NS, H - 1), H) is None
    assert aligned_span(TimeRange(0, H), H) == TimeRange(0, H)


def test_subtract_leaves_edges_and_missing_intervals_to_finer_lengths():
    gap = TimeRange(10 * NS, 4 * H + 5 * NS)
    # hours 1 and 3 present, hour 2 missing (a restart), hour 0 and 4 only partly in range
    assert subtract([gap], H, [H, 3 * H]) == [TimeRange(10 * NS, H), TimeRange(2 * H, 3 * H),
                                               TimeRange(4 * H, 4 * H + 5 * NS)]
    assert subtract([gap], H, []) == [gap]
    assert subtract([TimeRange(0, 2 * H)], H, [0, H]) == []
    # an interval sticking out of the gap is not taken
    assert subtract([TimeRange(0, H + 5)], H, [H]) == [TimeRange(0, H + 5)]


def test_bucket_lengths_are_stored_lengths():
    assert bucket_s(TimeRange(0, 300 * NS)) == 1
    assert bucket_s(TimeRange(0, H)) == 10
    assert bucket_s(TimeRange(0, 24 * H)) == 600
    assert bucket_s(TimeRange(0, 90 * 24 * H)) == 3600
    assert rollups_up_to(60) == (60, 10) and rollups_up_to(1) == ()
