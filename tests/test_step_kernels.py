"""The compiled step kernels (phaze/step/_kernels.pyx) against the plain-Python reference
(tests/naive_step.py: the kernels as they were before the Cython port, run as Python),
bit for bit: rank layouts, step times and their breakdown, memory per stage, the peak,
and the plan search itself, on the real inputs of several models (dense, all-MoE, mixed
dense/MoE, context and expert parallel variants) and architecture rows."""
import numpy as np
import pytest

import naive_collectives
import naive_step
from phaze import collectives
from phaze.arch import make_archs, presets
from phaze.step import _kernels as kern
from phaze.step import _layers, _plans

CASES = [  # model, devices, global batch, microbatch, extra grids
    ("bert-large", 64, 256, 2, {}),
    ("gpt3-175b", 1024, 1536, 1, {"tensor_parallel": (4, 8)}),
    ("mixtral-8x7b", 256, 512, 1, {"tensor_parallel": (1, 2)}),
    ("deepseek-v2-lite", 128, 256, 1, {"tensor_parallel": (1, 2)}),
]


def _rows():
    return np.concatenate([presets.get("a100-80g"), presets.get("h100-sxm"),
                           make_archs(base="h100-sxm", node_size=4, net_gb_per_s=12.5)])


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint8).tobytes()


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def case(request):
    name, devices, gb, mb, grids = request.param
    rows = _rows()
    table = _plans.layer_table(name, rows, microbatch=mb, **grids)
    return name, devices, gb, mb, table


def _grid(table, devices, gb, mb):
    """enumerate_plans' leading arguments for the table's variants: the (t, cp, ep) group of
    each variant, the groups' columns, the pipeline and data-parallel widths."""
    groups, var_g = [], []
    for t, _sp, _f, cp, ep, _mg in table.variants:
        if (t, cp, ep) not in groups:
            groups.append((t, cp, ep))
        var_g.append(groups.index((t, cp, ep)))
    grp = np.array(groups, dtype=np.int64).reshape(-1, 3)
    L = table.model.n_layers
    ps = np.array([p for p in range(1, L + 1) if L % p == 0], dtype=np.int64)
    ds = np.array([d for d in range(1, devices + 1) if gb % (mb * d) == 0], dtype=np.int64)
    return (np.array(var_g, dtype=np.int64), len(table.variants),
            np.ascontiguousarray(grp[:, 0]), np.ascontiguousarray(grp[:, 1]),
            np.ascontiguousarray(grp[:, 2]), ps, ds)


def _plan_sample(table, devices, gb, mb, recompute, k, seed):
    """k plans of the table's variants (every ZeRO stage, both overlaps, all v) drawn from
    what the search enumerates."""
    variants = table.variants
    L = table.model.n_layers
    cols = kern.enumerate_plans(*_grid(table, devices, gb, mb), devices, gb, mb, L,
                                np.array([0], dtype=np.int64), True,
                                np.array([0, 1, 2, 3], dtype=np.int64),
                                np.array([0, 1], dtype=np.uint8), False)
    plan_var, p, d, v, zero, ogr, mm, geo = cols[:8]
    pick = np.random.default_rng(seed).choice(plan_var.shape[0], min(k, plan_var.shape[0]),
                                              replace=False)
    vt = np.array([x[0] for x in variants])[plan_var]
    vcp = np.array([x[3] for x in variants])[plan_var]
    vep = np.array([x[4] for x in variants])[plan_var]
    vsp = np.array([x[1] for x in variants])[plan_var]
    # the sharding settings drawn per plan too (overlapped gathers, ZeRO-3 resharding)
    rng = np.random.default_rng(seed + 1)
    opg = rng.integers(0, 2, plan_var.shape[0]).astype(bool)
    reshard = rng.integers(0, 2, plan_var.shape[0]).astype(bool)
    plans = _layers.plan_records(p, vt, d, vcp, vep, v, mm, L, zero, ogr, recompute, vsp,
                                table.precision, "fp32", opg, reshard)
    # and plans splitting L + 2 layers (embedding and loss counted) where p·v divides it
    acct = ((L + 2) % (p * v) == 0) & ((L + 2) // (p * v) >= 2) & (p >= 2) \
        & rng.integers(0, 2, plan_var.shape[0]).astype(bool)
    plans["acct"] = acct
    return plans[pick], plan_var[pick], cols


@pytest.mark.parametrize("recompute", ["none", "selective", "full", "op"])
def test_step_time_and_memory_bit_for_bit(case, recompute):
    name, devices, gb, mb, table = case
    plans, plan_var, _ = _plan_sample(table, devices, gb, mb, recompute, 60, 7)
    sizes = table.sizes(recompute)
    prefix = _layers.kind_prefix(table.model)
    checked = 0
    for k in range(plans.shape[0]):
        pl = plans[k:k + 1]
        vi = int(plan_var[k])
        p, t, d, cp, ep = (int(pl[f][0]) for f in ("p", "t", "d", "cp", "ep"))
        for row in range(len(table)):
            ns = int(table.node_size[row])
            if t > ns:
                continue
            st_c = np.zeros(p, kern.STAGE_NODES)
            cell_c = np.zeros(1, kern.CELL_NODES)
            kern.stage_geometry(p, t, d, cp, ep, ns, st_c, cell_c)
            st_n = np.zeros(p, kern.STAGE_NODES)
            cell_n = np.zeros(1, kern.CELL_NODES)
            naive_step.stage_geometry(p, t, d, cp, ep, ns, st_n, cell_n[0])
            assert _bits(st_c) == _bits(st_n) and _bits(cell_c) == _bits(cell_n)
            lt = table.times[vi, row:row + 1]
            rp = table.rp[row:row + 1]
            bd_c = np.zeros(1, kern.BREAKDOWN)
            bd_n = np.zeros(1, kern.BREAKDOWN)
            slots_c = np.zeros((p, 6))
            slots_n = np.zeros((p, 6))
            tc = kern.step_time(pl, cell_c, st_c, lt, rp, sizes[vi:vi + 1], prefix, slots_c, bd_c)
            tn = naive_step.step_time(pl[0], cell_n[0], st_n, lt[0], rp[0], sizes[vi], prefix,
                                      slots_n, bd_n[0])
            assert tc == tn and _bits(bd_c) == _bits(bd_n), (name, pl, row)
            assert _bits(slots_c) == _bits(slots_n)
            checked += 1
        mem_c = np.zeros(1, kern.MEMORY)
        mem_n = np.zeros(1, kern.MEMORY)
        for r in range(int(pl["p"][0])):
            assert kern.stage_memory(r, pl, sizes[vi:vi + 1], prefix, mem_c) \
                == naive_step.stage_memory(r, pl[0], sizes[vi], prefix, mem_n[0])
            assert _bits(mem_c) == _bits(mem_n)
        assert kern.peak_stage_memory(pl, sizes[vi:vi + 1], prefix, mem_c) \
            == naive_step.peak_stage_memory(pl[0], sizes[vi], prefix, mem_n[0])
        assert _bits(mem_c) == _bits(mem_n)
    assert checked > 0
    np.testing.assert_array_equal(kern.plan_memory(plans, plan_var, sizes, prefix),
                                  naive_step.plan_memory(plans, plan_var, sizes, prefix))


def test_plan_enumeration_and_geometry_bit_for_bit(case):
    name, devices, gb, mb, table = case
    _, _, cols = _plan_sample(table, devices, gb, mb, "full", 1, 0)
    L = table.model.n_layers
    for launchable in (False, True):
        args = (*_grid(table, devices, gb, mb), devices, gb, mb, L,
                np.array([1, 2], dtype=np.int64), False, np.array([0, 1, 2, 3], dtype=np.int64))
        got = kern.enumerate_plans(*args, np.array([0, 1], dtype=np.uint8), launchable)
        want = naive_step.enumerate_plans(*args, np.array([False, True]), launchable)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    geo = cols[8:]
    ns_values = np.array([2, 4, 8], dtype=np.int64)
    for a, b in zip(kern.build_geometry(*geo, ns_values, devices),
                    naive_step.build_geometry(*geo, ns_values, devices)):
        assert _bits(a) == _bits(b)


def test_plan_search_bit_for_bit(case):
    """search_rows over a sample of plans (the reference is slow Python): the same plan and
    the same breakdown on every row."""
    name, devices, gb, mb, table = case
    recompute = "selective"
    plans, plan_var, cols = _plan_sample(table, devices, gb, mb, recompute, 150, 3)
    sizes = table.sizes(recompute)
    prefix = _layers.kind_prefix(table.model)
    geo_t, geo_cp, geo_ep, geo_p, geo_d = cols[8:]
    ns_values, row_nsi = np.unique(table.node_size, return_inverse=True)
    row_nsi = row_nsi.astype(np.int64).reshape(-1)
    geo_off, geo_stages, geo_cells = kern.build_geometry(geo_t, geo_cp, geo_ep, geo_p, geo_d,
                                                         ns_values.astype(np.int64), devices)
    # each sampled plan's geometry cell (t, cp, ep, p, d) among the enumeration's
    pick_geo = np.empty(plans.shape[0], dtype=np.int64)
    for k in range(plans.shape[0]):
        t, cp, ep, p, d = (int(plans[f][k]) for f in ("t", "cp", "ep", "p", "d"))
        match = np.flatnonzero((geo_t == t) & (geo_cp == cp) & (geo_ep == ep) & (geo_p == p)
                               & (geo_d == d))
        pick_geo[k] = match[0]
    peak = kern.plan_memory(plans, plan_var, sizes, prefix)
    var_ok = np.array([[t <= ns for ns in table.node_size] for t, *_ in table.variants])
    found = 0
    for cap_gib in (1e4, 80.0, 20.0):
        cap = np.full(len(table), cap_gib * 2 ** 30)
        out_c = (np.full(len(table), -1, dtype=np.int64), np.zeros(len(table), kern.BREAKDOWN))
        out_n = (np.full(len(table), -1, dtype=np.int64), np.zeros(len(table), kern.BREAKDOWN))
        _, first, inverse = np.unique(np.stack([plan_var, plans["p"], plans["v"]]), axis=1,
                                      return_index=True, return_inverse=True)
        kern.search_rows(plans, plan_var, pick_geo, inverse.reshape(-1).astype(np.int64),
                         first.astype(np.int64), peak, sizes, var_ok.view(np.uint8),
                         table.times, table.rp, cap, row_nsi, geo_off, geo_stages, geo_cells,
                         prefix, *out_c)
        naive_step.search_rows(plans, plan_var, pick_geo, peak, sizes, var_ok, table.times,
                               table.rp, cap, row_nsi, geo_off, geo_stages, geo_cells, prefix,
                               *out_n)
        np.testing.assert_array_equal(out_c[0], out_n[0])
        found += int((out_c[0] >= 0).sum())
        assert _bits(out_c[1][out_c[0] >= 0]) == _bits(out_n[1][out_n[0] >= 0])
    assert found > 0


def test_collectives_python_face_is_the_reference():
    """phaze.collectives (compiled, _ring.pxd) against the functions as they were before the
    Cython port, run as Python (tests/naive_collectives.py)."""
    rng = np.random.default_rng(5)
    fab = collectives.fabric(coll_latency_s=12e-6, link_step_s=0.7e-6, net_step_s=4.1e-6,
                             link_bw=2.3e11, net_bw=2.1e10)
    for _ in range(400):
        n = int(rng.integers(1, 600))
        nodes = int(rng.integers(1, n + 1))
        nbytes = int(rng.integers(0, 2 ** 40))
        for fn in ("all_reduce_seconds", "reduce_scatter_seconds", "all_gather_seconds",
                   "all_to_all_seconds", "p2p_seconds"):
            assert getattr(collectives, fn)(nbytes, n, nodes, fab) \
                == getattr(naive_collectives, fn)(nbytes, n, nodes, fab), (fn, n, nodes, nbytes)
        g, ns = float(n), float(rng.integers(1, 17))
        args = (g, float(nbytes), ns, 3e11, 2.5e10, 1e-5, 1e-6, 5e-6, 0.8, 0.9)
        assert collectives.contiguous_all_reduce_seconds(*args) \
            == naive_collectives.contiguous_all_reduce_seconds(*args)
