"""The fast subset (`bash scripts/test.sh -m "not slow"`): a test marked `one_case_fast` keeps its last case there."""

import collections

import pytest


def _cases_by_test(items):
    cases = collections.defaultdict(list)
    for item in items:
        if item.get_closest_marker("one_case_fast") is not None:
            cases[(item.path, item.originalname)].append(item)
    return cases


def test_a_one_case_fast_test_runs_its_last_case_alone_in_the_fast_subset(request):
    cases = _cases_by_test(request.session.items)
    if not cases:
        pytest.skip("the optimizers' tests were not collected in this session")
    for name, items in cases.items():
        fast = [item for item in items if item.get_closest_marker("slow") is None]
        if len(items) == 1:  # `-m "not slow"`: the others were deselected
            assert fast == items, name
        else:  # the whole suite: every case, the last one alone unmarked
            assert fast == [items[-1]], name
