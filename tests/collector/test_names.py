"""The one validator for user-typed names refuses everything that could reach a path."""
import pytest

from collector.names import InvalidName, check_name, check_tag_value, is_name


@pytest.mark.parametrize("name", ["run-20261125-012000", "e2e-p99", "a", "x.y:z@h+1_2", "A" * 128])
def test_accepts_plain_names(name):
    assert check_name(name) == name and is_name(name)


@pytest.mark.parametrize("name,why", [
    ("", "non-empty"), ("..", "'..'"), ("../x", "path separator"), ("/abs/path", "path separator"),
    ("a\\b", "path separator"), ("name\n", "control"), ("tab\there", "control"), ("x" * 129, "at most"),
    ("-flag", "start with"), (".hidden", "start with"), ("a b", "only letters"), ("<script>", "only letters"),
    ("a..b", "'..'"), (None, "non-empty"), (5, "non-empty"),
])
def test_refuses_unsafe_names(name, why):
    with pytest.raises(InvalidName, match=why):
        check_name(name, "run id")
    assert not is_name(name)


def test_tag_values_allow_slash_but_not_paths():
    assert check_tag_value("host/p0") == "host/p0"
    for bad in ("/etc/passwd", "a/../b", "x\ny", "", "w" * 201):
        with pytest.raises(InvalidName):
            check_tag_value(bad, "worker")


def test_to_name_makes_a_safe_name_of_free_text():
    from collector.names import check_name, to_name
    assert to_name("orders enrichment") == "orders_enrichment"
    assert to_name("ok-name_1.v2") == "ok-name_1.v2"
    for hostile in ("<script>alert(1)</script>", "../../etc/passwd", "a\x00b", "x" * 1000, "名前", "  "):
        assert check_name(to_name(hostile)) == to_name(hostile)
    assert to_name("", "fallback") == "fallback" and to_name(None) == "query"
