"""The catalogue of figures knows every field the writers write, and the alerts' figures are its own."""
from __future__ import annotations

import ast
from pathlib import Path

from collector import catalogue, vocabulary
from collector.backpressure import BackpressureFigures, backpressure_point
from collector.catalogue import FIGURES, LEVELS, fields_of, phase_field
from collector.graphite import FIELDS as GRAPHITE_FIELDS, GC_COUNT, GC_TIME
from collector.vocabulary import BACKPRESSURE, SPARK_EXECUTOR, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE
from spark_listener.points import progress_point, source_points, state_points
from spark_listener.query_figures import SourceFigures, StateFigures
from spark_listener.records import BatchProgress

from alerts import figures as alert_figures

ROOT = Path(__file__).resolve().parents[1]


def _full_batch() -> BatchProgress:
    """A batch with every optional figure present, so its points carry every field they can."""
    return BatchProgress(
        run="r", query="q", query_id="qid", run_id="rid", batch_id=3, ts_ns=10**18, batch_ms=1200, events=10,
        input_events_per_s=1.0, processed_events_per_s=2.0, durations_ms={"addBatch": 5, "triggerExecution": 9},
        state_rows=4, state_memory_bytes=5, backlog=6, end_seq=7, input_blocks=8, input_rows_per_s=9.0,
        processed_rows_per_s=10.0, watermark_ns=10**18 - 5, late_rows=1, rows_behind=2,
        sources=(SourceFigures("0:Kafka", 3, 1.0, 2.0, 4, 5),),
        operators=(StateFigures("0:stateStoreSave", 1, 2, 3, 4, 5),))


def test_the_listener_writes_only_catalogued_fields():
    r = _full_batch()
    for point in [progress_point(r, dropped=1, trigger_ms=1000, startup=True), *source_points(r), *state_points(r)]:
        unknown = set(point.fields) - fields_of(point.measurement)
        assert not unknown, f"{point.measurement} fields not in collector.catalogue: {sorted(unknown)}"
    assert {p.measurement for p in [*source_points(r), *state_points(r)]} == {SPARK_SOURCE, SPARK_STATE}
    assert phase_field("addBatch") in progress_point(r).fields and SPARK_PROGRESS in {
        lv.measurement for lv in LEVELS.values()}


def test_the_executor_source_and_backpressure_fields_are_catalogued():
    assert set(GRAPHITE_FIELDS.values()) | {GC_TIME, GC_COUNT} <= fields_of(SPARK_EXECUTOR)
    bp = backpressure_point("r", "job", BackpressureFigures(0.5, 0.1, 0.4, 3, 1.0, "OK", 2.0, 3.0, 0.2), 1)
    assert set(bp.fields) <= fields_of(BACKPRESSURE)


def _point_field_keys(path: Path) -> dict[str, set[str]]:
    """Return measurement constant -> the literal field keys of each `Point(NAME, tags, {...}, t)` in a file."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Point" and len(node.args) >= 3 \
                and isinstance(node.args[0], ast.Name) and isinstance(node.args[2], ast.Dict):
            keys = {k.value for k in node.args[2].keys if isinstance(k, ast.Constant)}
            out.setdefault(getattr(vocabulary, node.args[0].id), set()).update(keys)
    return out


def test_the_status_store_poll_writes_only_catalogued_fields():
    written = _point_field_keys(ROOT / "spark_listener" / "executors.py")
    for measurement, keys in written.items():
        assert keys <= fields_of(measurement), (measurement, sorted(keys - fields_of(measurement)))


def test_every_figure_has_a_level_unit_and_label():
    units = {catalogue.DURATION, catalogue.RATE, catalogue.ROWS, catalogue.BYTES, catalogue.SHARE, catalogue.COUNT}
    for f in FIGURES.values():
        assert f.unit in units and f.label and f.origin and f.spark, f.name
        assert set(f.fields) <= set(LEVELS), f.name
        assert f.field() == f.fields[f.levels[0]][0]


def test_alert_figures_are_the_catalogue_figures_with_a_generic_condition():
    assert set(alert_figures.FIGURES) < set(FIGURES)
    assert all(alert_figures.FIGURES[n] is FIGURES[n] for n in alert_figures.FIGURES)
    own = {n for n, f in FIGURES.items() if f.condition == catalogue.OWN}
    assert own == {"latency", "throughput", "backlog", "backpressure"}
    assert not own & set(alert_figures.FIGURES)


def test_the_guarded_field_names_include_the_distinctive_spark_fields():
    assert {"watermark_delay_ms", "rows_behind", "memory_bytes", "heap_used_bytes", "late_rows"} \
        <= catalogue.SPARK_FIELD_NAMES
    assert not {"count", "status", "active", "lost", "batch_id"} & catalogue.SPARK_FIELD_NAMES


def test_metrics_md_lists_every_figure_of_the_catalogue():
    text = (ROOT / "docs" / "METRICS.md").read_text()
    table = text[text.index("## The catalogue of figures"):text.index("## Schema")]
    listed = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert listed == set(FIGURES), (sorted(set(FIGURES) - listed), sorted(listed - set(FIGURES)))
