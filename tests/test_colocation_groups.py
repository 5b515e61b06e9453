"""Grouping policies and the online co-location scheduler (issue 17): no group ever exceeds the budget under any arrival sequence and policy, every request runs once or is refused once, and FIFO / SQTF / BQT order and cut groups as GNNSched's algorithms do (without their overshoot)."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitrpc.services.colocation import groups
from splitrpc.services.colocation.groups import CoScheduler, Refused, Request, form_groups

BUDGET = 1000


def _req(seq, pmc, qos=1.0):
    return Request(seq, pmc, qos)


# one step of an arrival sequence: a request arrives (pmc, qos), or the device asks for the next
# group, or one running request finishes (which one: an index into those running)
steps = st.lists(st.one_of(
    st.tuples(st.just("arrive"), st.integers(-5, 2 * BUDGET), st.floats(0.001, 100)),
    st.tuples(st.just("next"), st.none(), st.none()),
    st.tuples(st.just("finish"), st.integers(0, 50), st.none())), max_size=120)


@settings(max_examples=300, deadline=None)
@given(policy=st.sampled_from(groups.POLICIES), seq=steps)
def test_no_group_over_budget_and_each_request_runs_or_is_refused_once(policy, seq):
    s = CoScheduler(BUDGET, policy)
    arrived, ran, refused = [], [], []
    for i, (what, a, b) in enumerate(seq):
        if what == "arrive":
            r = _req(i, a, b)
            arrived.append(r)
            try:
                s.submit(r)
            except Refused:
                refused.append(r)
        elif what == "next":
            g = s.next_group()
            assert sum(r.pmc for r in g) <= BUDGET
            assert s.reserved <= BUDGET
            ran += g
        elif s.running:
            s.done(list(s.running.values())[a % len(s.running)])
    while s.queue or s.running:  # drain: finish what runs, start what waits
        for r in list(s.running.values()):
            s.done(r)
        g = s.next_group()
        assert sum(r.pmc for r in g) <= BUDGET
        ran += g
    seqs = [r.seq for r in ran] + [r.seq for r in refused]
    assert sorted(seqs) == sorted(r.seq for r in arrived)  # each exactly once
    assert all(r.pmc > BUDGET or r.pmc <= 0 for r in refused)
    assert s.peak_reserved <= BUDGET


@settings(max_examples=300, deadline=None)
@given(policy=st.sampled_from(groups.POLICIES),
       pmcs=st.lists(st.integers(1, BUDGET), min_size=1, max_size=60),
       qos=st.lists(st.floats(0.001, 10), min_size=60, max_size=60))
def test_form_groups_partitions_the_queue_within_the_budget(policy, pmcs, qos):
    queue = [_req(i, p, qos[i]) for i, p in enumerate(pmcs)]
    gs = form_groups(queue, BUDGET, policy)
    assert sorted(r.seq for g in gs for r in g) == list(range(len(queue)))
    assert all(g and sum(r.pmc for r in g) <= BUDGET for g in gs)
    if policy == "serial":
        assert [g[0].seq for g in gs] == list(range(len(queue)))


def test_the_printed_algorithm_would_overshoot_here_ours_does_not():
    # SP = 1500, gTH = ceil(1500 / 2) = 750: the paper's test (gPMC > gTH before adding) puts
    # 700 + 700 in one group (gPMC = 700 is not > 750), 1400 > MA = 1000.
    q = [_req(0, 700), _req(1, 700), _req(2, 100)]
    for policy in ("sqtf", "bqt"):
        gs = form_groups(q, BUDGET, policy)
        assert all(sum(r.pmc for r in g) <= BUDGET for g in gs), (policy, gs)
    assert [[r.seq for r in g] for g in form_groups(q, BUDGET, "sqtf")] == [[0], [1, 2]]


def test_sqtf_orders_by_qos_and_bqt_alternates_the_ends():
    q = [_req(i, 10, qos) for i, qos in enumerate([5.0, 1.0, 4.0, 2.0, 3.0])]
    assert [r.seq for r in form_groups(q, BUDGET, "sqtf")[0]] == [1, 3, 4, 2, 0]
    assert [r.seq for r in form_groups(q, BUDGET, "bqt")[0]] == [1, 0, 3, 2, 4]
    assert [r.seq for r in form_groups(q, BUDGET, "fifo")[0]] == [0, 1, 2, 3, 4]


def test_group_threshold_evens_groups_out():
    assert groups.group_threshold(2500, 1000) == math.ceil(2500 / 3)
    assert groups.group_threshold(800, 1000) == 800
    q = [_req(i, 300) for i in range(8)]  # SP 2400, 3 groups, gTH 800
    gs = form_groups(q, BUDGET, "sqtf")
    assert [sum(r.pmc for r in g) for g in gs] == [900, 900, 600]
    assert [sum(r.pmc for r in g) for g in form_groups(q, BUDGET, "fifo")] == [900, 900, 600]


@pytest.mark.parametrize("pmc,qos,why", [(BUDGET + 1, 1.0, "exceeds the memory budget"), (0, 1.0, "not a positive"),
                                         (float("nan"), 1.0, "not a positive"), (10, float("nan"), "QoS target"),
                                         (10, -1.0, "QoS target")])
def test_a_request_that_can_never_run_is_refused_with_its_reason(pmc, qos, why):
    s = CoScheduler(BUDGET, "bqt")
    with pytest.raises(Refused, match=why) as e:
        s.submit(Request(1, pmc, qos))
    assert e.value.request.seq == 1 and not s.queue


def test_groups_run_one_at_a_time_and_release_their_memory():
    s = CoScheduler(BUDGET, "fifo")
    for i, p in enumerate([600, 300, 500]):
        s.submit(_req(i, p))
    g1 = s.next_group()
    assert [r.seq for r in g1] == [0, 1] and s.reserved == 900
    s.submit(_req(3, 50))
    assert s.next_group() == []            # one group at a time
    assert s.done(g1[0]) is False and s.reserved == 900
    assert s.done(g1[1]) is True and s.reserved == 0
    assert [r.seq for r in s.next_group()] == [2, 3]  # re-formed with what arrived
    with pytest.raises(KeyError):
        s.done(_req(0, 600))


def test_bad_scheduler_settings():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            CoScheduler(bad, "fifo")
    with pytest.raises(ValueError):
        CoScheduler(BUDGET, "lifo")
    with pytest.raises(ValueError):
        form_groups([], BUDGET, "lifo")
