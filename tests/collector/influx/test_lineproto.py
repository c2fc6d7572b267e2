"""Line protocol encoding (pure): escaping, what is left out, what cannot be carried."""
from __future__ import annotations

import numpy as np
import pytest

from collector.influx import Point, encode_lines
from collector.testing import MemoryWriter


@pytest.mark.parametrize("point, line", [
    (Point("cpu", {}, {"v": 1.5}, 7), "cpu v=1.5 7"),
    (Point("c p,u", {}, {"v": 1}, 7), r"c\ p\,u v=1i 7"),
    (Point("m=x", {"a=b": "c d,e"}, {"f k": "s"}, 1), r'm=x,a\=b=c\ d\,e f\ k="s" 1'),
    (Point("m", {"z": "1", "a": "2", "empty": ""}, {"b": True, "n": False}, 1), "m,a=2,z=1 b=true,n=false 1"),
    (Point("m", {}, {"s": 'say "hi" \\o/'}, 1), r'm s="say \"hi\" \\o/" 1'),
    (Point("m", {}, {"s": "two\nlines"}, 1), 'm s="two\nlines" 1'),
    (Point("m", {"t": "a\\b"}, {"v": 1}, 1), "m,t=a\\b v=1i 1"),
    (Point("m", {}, {"i": np.int64(-3), "f": np.float32(0.5), "x": 1e-7, "big": 2**62}, 1),
     "m i=-3i,f=0.5,x=1e-07,big=4611686018427387904i 1"),
    (Point("m", {}, {"nan": float("nan"), "inf": float("inf"), "ok": 0.0}, 1), "m ok=0.0 1"),
    (Point("ünï", {"ç": "ß"}, {"v": "€"}, 1), 'ünï,ç=ß v="€" 1'),
])
def test_encode_escapes(point, line):
    assert encode_lines([point]) == (line + "\n").encode()


def test_encode_skips_point_without_finite_field():
    assert encode_lines([Point("m", {}, {"x": float("nan")}, 1)]) == b""
    assert encode_lines([]) == b""


@pytest.mark.parametrize("point", [
    Point("", {}, {"v": 1}, 1),
    Point("#comment", {}, {"v": 1}, 1),
    Point("m", {"t": "new\nline"}, {"v": 1}, 1),
    Point("m", {"t": "trailing\\"}, {"v": 1}, 1),
    Point("m", {"": "v"}, {"v": 1}, 1),
    Point("m", {}, {"v": [1]}, 1),
])
def test_encode_refuses_what_line_protocol_cannot_carry(point):
    with pytest.raises(ValueError):
        encode_lines([point])


def test_memory_writer_keeps_points_per_policy():
    w = MemoryWriter()
    w.add(Point("a", {}, {"v": 1}, 1))
    w.add([Point("b", {}, {"v": 2}, 2)], rp="rollup")
    assert [p.measurement for p in w.points] == ["a", "b"]
    assert w.measurement("b", rp="rollup")[0].fields == {"v": 2}
    assert w.stats().points_written == 2
    with pytest.raises(ValueError):
        w.add(Point("a", {"t": "x\n"}, {"v": 1}, 1))
