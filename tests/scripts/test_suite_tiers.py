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


def _groups(item):
    return [mark.args[0] if mark.args else mark.kwargs.get("name") for mark in item.iter_markers("xdist_group")]


def test_the_tests_that_share_a_fixture_wider_than_a_test_share_one_xdist_group(request):
    """Built once, not once on each xdist worker that gets one of its tests (`--dist loadgroup`).

    A module- or class-scoped fixture of a file under tests/ is shared by the tests of its
    module (or class), a session-scoped one by every test using it: each such set is in one
    group, and a test has exactly one group mark (xdist would join several into a new name).
    """
    sharing = collections.defaultdict(set)
    for item in request.session.items:
        assert len(_groups(item)) <= 1, (item.nodeid, _groups(item))
        for name, definitions in item._fixtureinfo.name2fixturedefs.items():
            definition = definitions[-1]
            if definition.scope == "function" or not definition.baseid:
                continue
            holder = {"module": item.path, "class": item.cls}.get(definition.scope)
            sharing[(definition.baseid, name, holder)].add(item)
    if not sharing:
        pytest.skip("no test of this session shares a fixture wider than one test")
    for (_, name, holder), items in sharing.items():
        if len(items) > 1:
            names = {tuple(_groups(item)) for item in items}
            assert len(names) == 1 and () not in names, (name, holder, names)
