"""The MILP's answer as a record (issue 23): a status from the one vocabulary of
phaze.schedule plus HiGHS's own model-status message, kept in the Schedule."""
import importlib

import numpy as np
import pytest

highspy = pytest.importorskip("highspy")

from phaze import _config  # noqa: E402
from phaze import schedule as S  # noqa: E402
from phaze._cache import Memo  # noqa: E402
from phaze.graph import OpGraph  # noqa: E402
from phaze.schedule import _driver, _milp  # noqa: E402

import naive  # noqa: E402

# the module (the face re-exports its function ``_prepare`` under the same name)
_prepare = importlib.import_module("phaze.schedule._prepare")


def _graph(kinds, preds):
    return OpGraph.from_ops([{"name": f"op{i}", "kind": int(k), "preds": list(p)}
                             for i, (k, p) in enumerate(zip(kinds, preds))])


# Two GEMMs that may run side by side on two tensor cores or one after the other
# intra-op, then a vector operator after the first: optimum 3 (naive reference below).
TINY = ([0, 0, 1], [[], [], [0]], np.array([2.0, 2.0, 1.0]), np.array([1.0, 1.5, 1.0]), 1, 1)


def _random_instance(seed=0, n=14):
    """A 14-operator instance whose list schedule the bounds do not prove optimal."""
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, 3, n)
    preds = [sorted(set(rng.integers(0, j, size=1).tolist())) if j else [] for j in range(n)]
    return kinds, preds, rng.integers(1, 12, n) * 1e-4, rng.integers(1, 12, n) * 1e-4, 2, 2


def _solve_whole(kinds, preds, single, intra, ntc, nvc, *, gap, time_limit):
    """``_milp.solve`` on the whole graph, started from the list schedule."""
    g = _graph(kinds, preds)
    initial = S.list_schedule(g, single, intra, ntc, nvc, gap=gap)
    prep = _prepare._prepare(g, split=False)
    perm = prep.perm
    da = np.where(np.asarray(kinds) == 3, single, intra)
    return _milp.solve(prep.kind, single[perm], da[perm], prep.local_preds, ntc, nvc,
                       np.asarray(initial.starts)[perm], np.asarray(initial.modes)[perm],
                       initial.lower_bound, gap, time_limit)


def test_tiny_milp_is_optimal_with_highs_message():
    kinds, preds, single, intra, ntc, nvc = TINY
    res = _solve_whole(*TINY, gap=0.0, time_limit=10.0)
    assert isinstance(res, _milp.MilpResult)
    assert res.status == "optimal" and res.proved
    assert res.message == "Optimal"
    opt, _, _ = naive.schedule_optimum(kinds, preds, list(single), list(intra), ntc, nvc)
    assert res.makespan == pytest.approx(opt, rel=1e-12) and res.lower_bound == res.makespan


def test_time_limit_zero_stops_with_limit_status():
    # HiGHS checks its clock before any work: a zero time limit always stops it there
    inst = _random_instance()
    res = _solve_whole(*inst, gap=0.0, time_limit=0.0)
    assert res.status == "limit" and not res.proved
    assert res.message == "Time limit reached"
    assert res.lower_bound < res.makespan
    g = _graph(*inst[:2])
    sched = S.milp_schedule(g, *inst[2:], gap=0.0, time_limit=0.0)
    assert (sched.status, sched.message) == ("limit", "Time limit reached")
    assert S.check_schedule(g, *inst[2:], sched) == []


def test_message_reaches_the_schedule():
    kinds, preds, single, intra, ntc, nvc = TINY
    g = _graph(kinds, preds)
    res = S.milp_schedule(g, single, intra, ntc, nvc, gap=0.0)
    assert (res.status, res.message) == ("optimal", "Optimal")
    # no MILP ran: empty message, and the other fields as before
    listed = S.list_schedule(g, single, intra, ntc, nvc)
    assert listed.message == ""
    assert S.Schedule(1.0, 1.0, np.zeros(1), np.zeros(1, np.int8), "optimal").message == ""


def test_auto_keeps_the_message_of_each_part(monkeypatch):
    # with the compiled pipeline's searches off, a part outside the gap goes to the MILP
    for name in ("SCHEDULE_EXACT_MAX_OPS", "SCHEDULE_BNB_NODE_LIMIT",
                 "SCHEDULE_MODE_SEARCH_ROUNDS", "SCHEDULE_OPEN_PART_NODES"):
        monkeypatch.setattr(_config, name, 0)
    S.clear_memo()
    kinds, preds, single, intra, ntc, nvc = _random_instance()
    g = _graph(kinds, preds)
    res = S.schedule_layer(g, single, intra, ntc, nvc, gap=0.0)
    assert res.status == "optimal"
    parts = res.message.split("; ")
    assert parts and all(p.startswith("part ") and p.endswith(": Optimal") for p in parts)
    assert S.check_schedule(g, single, intra, ntc, nvc, res) == []
    S.clear_memo()
    no_milp = S.schedule_layer(g, single, intra, ntc, nvc, gap=0.0, time_limit=0.0)
    assert no_milp.message == "" and no_milp.status == "limit"
    S.clear_memo()


@pytest.mark.parametrize("member", sorted(highspy.HighsModelStatus.__members__))
def test_status_of_every_highs_model_status(member):
    status = highspy.HighsModelStatus.__members__[member]
    usable = member in ("kOptimal", "kTimeLimit", "kIterationLimit", "kSolutionLimit",
                        "kObjectiveBound", "kObjectiveTarget", "kInterrupt", "kHighsInterrupt")
    for arg in (status, member):
        if not usable:
            assert _milp.status_of(arg, False, 2.0, 1.0, 0.01) == "error"
            assert _milp.status_of(arg, True, 2.0, 2.0, 0.01) == "error"
            continue
        assert _milp.status_of(arg, True, 2.0, 2.0, 0.01) == "optimal"
        assert _milp.status_of(arg, False, 2.0, 1.99, 0.01) == "certified"
        assert _milp.status_of(arg, False, 2.0, 1.0, 0.01) == "limit"
        assert _milp.status_of(arg, False, 2.0, 2.0, 0.0) == "certified"
    assert _milp.status_of(status, False, 1.0, 0.0, 0.5) in S.STATUS_NAMES


def test_highs_failure_returns_the_list_schedule_with_status_error(monkeypatch):
    kinds, preds, single, intra, ntc, nvc = _random_instance()
    g = _graph(kinds, preds)
    listed = S.list_schedule(g, single, intra, ntc, nvc, gap=0.0)

    def failed(kind, ds, da, preds_, ntc_, nvc_, starts, modes, lower, gap, time_limit):
        return _milp.MilpResult(starts, modes, 0.0, 0.0, False, "error", "Solve error")

    monkeypatch.setattr(_milp, "solve", failed)
    res = S.milp_schedule(g, single, intra, ntc, nvc, gap=0.0)
    assert (res.status, res.message) == ("error", "Solve error")
    assert res.makespan == listed.makespan and res.lower_bound == listed.lower_bound
    assert np.array_equal(res.starts, listed.starts)

    def raises(*args):
        raise RuntimeError("no licence needed, just broken")

    monkeypatch.setattr(_milp, "solve", raises)
    res = S.milp_schedule(g, single, intra, ntc, nvc, gap=0.0)
    assert res.status == "error"
    assert res.message == "HiGHS failed: RuntimeError: no licence needed, just broken"


def test_schedule_caches_are_the_package_memo(monkeypatch):
    assert isinstance(_driver._MEMO, Memo) and isinstance(_prepare._PREP_CACHE, Memo)
    assert _driver._MEMO.maxsize == _config.SCHEDULE_MEMO_SIZE
    assert _prepare._PREP_CACHE.maxsize == _config.SCHEDULE_PREP_CACHE_SIZE
    kinds, preds, single, intra, ntc, nvc = TINY
    g = _graph(kinds, preds)
    S.clear_memo()
    first = S.schedule_layer(g, single, intra, ntc, nvc)
    assert S.schedule_layer(g, single, intra, ntc, nvc) is first  # memo hit
    assert _prepare._prepare(g) is _prepare._prepare(g)
    S.clear_memo()
    assert len(_driver._MEMO) == 0
    # the size is read at each insertion: a smaller setting applies at once
    monkeypatch.setattr(_config, "SCHEDULE_MEMO_SIZE", 1)
    S.schedule_layer(g, single, intra, ntc, nvc, gap=0.0)
    S.schedule_layer(g, single, intra, ntc, nvc, gap=0.5)
    assert len(_driver._MEMO) == 1
    S.clear_memo()
