"""`check_scope`, the pure part of the scope-name check: messages and what is accepted."""
from __future__ import annotations

import pytest

from alerts.rules import Rule
from alerts.scope_names import FIXED, MAX_LISTED, ReportedNames, check_scope


def _rule(**kw) -> Rule:
    return Rule.from_dict({"name": "r", "condition": "p99 > 5ms", **kw})


def test_fixed_lists_refuse_a_misspelled_step_or_pipeline_and_list_the_valid_ones():
    with pytest.raises(ValueError) as e:
        check_scope(_rule(step="chek_market_data"), FIXED)
    assert str(e.value) == ("rule 'r': step 'chek_market_data' is not a step of any run; did you mean "
                            "'check_market_data'? valid: ingress, source, check_market_data, sink, start-to-end")
    with pytest.raises(ValueError, match=r"pipeline 'NBBO' is not a pipeline of any run; .*valid: nbbo, orders$"):
        check_scope(_rule(pipeline="NBBO"), FIXED)
    assert check_scope(_rule(step="sink", pipeline="orders"), FIXED) is None


def test_an_unknown_worker_list_accepts_any_worker_with_a_note():
    names = ReportedNames(FIXED.steps, FIXED.pipelines, None, "any run", "InfluxDB at http://x:1 is unreachable")
    assert check_scope(_rule(worker="h/p0"), names) == \
        "rule 'r': worker 'h/p0' not checked (InfluxDB at http://x:1 is unreachable)"
    assert check_scope(_rule(), names) is None


def test_a_runs_own_names_are_those_of_the_rules_step_and_long_lists_are_cut():
    workers = tuple(f"host/p{i}" for i in range(MAX_LISTED + 5))
    names = ReportedNames(("source", "sink"), ("orders",), workers, "run r1", of_step=True)
    with pytest.raises(ValueError) as e:
        check_scope(_rule(job="r1", step="sink", worker="host/p99"), names)
    assert "worker 'host/p99' is not a worker of run r1's step sink" in str(e.value)
    assert str(e.value).endswith(f"host/p{MAX_LISTED - 1} … ({MAX_LISTED + 5} in all)")
    with pytest.raises(ValueError, match="pipeline 'nbbo' is not a pipeline of run r1's step sink"):
        check_scope(_rule(job="r1", step="sink", pipeline="nbbo"), names)
    with pytest.raises(ValueError, match=r"step 'start-to-end' is not a step of run r1; valid: source, sink$"):
        check_scope(_rule(job="r1"), names)
    assert check_scope(_rule(job="r1", step="sink", worker="host/p3", pipeline="orders"), names) is None


def test_job_wide_figures_have_no_step_to_check():
    assert check_scope(_rule(condition="backlog > 1M"), ReportedNames((), (), (), "run r1")) is None
