# cython: language_level=3
"""Exact data × pipeline × tensor-parallel placement DP on a layer chain.

The model (stated in ../shared/golden/placement/README.md) is the original
study's: cut the chain into S contiguous stages, stage at position s (counted
from the end) must fit ``const + (s-1)·stash`` bytes, a stage occupies t devices
if it holds a tensor-parallel layer (else 1), and

    time = max_load · (⌈m/d⌉ + S − 1) + 4·(d−1)·P_first / (bandwidth·d).

Structure used instead of the original's O(L²·D·S) downset DP (all exact):

* Suffix DP ``g[s][i][k]`` = least max-load of the layers i.. cut into s stages
  at positions s..1 with at least k stages free of tensor-parallel layers.  The
  memory limit of a stage depends only on its position, never on d or on the
  total stage count, so one table serves every S.  ``k`` exists only when the
  flags are mixed at t > 1 (else every stage has the same device count and
  devices follow from S alone).
* The first stage (position S) is enumerated separately because its parameter
  bytes enter the objective through the gradient-sync term.
* Cut ends are scanned from the stage start; the scan stops when memory fails
  (memory grows with the stage) or when the prefix-sum lower bound
  F + B (+F with recomputation) of the stage load reaches the best value found
  (that bound grows with the stage; the load itself, with edge waits, does not).
* For a plan (X = max load, P_first, device count n) the best d ≤ min(m, D//n)
  is found among the smallest d of each ⌈m/d⌉ value, scanning down from the
  largest and stopping with the bound X·(m/d + S − 1) + Y·(1 − 1/d).
* Suffix values that cannot beat the best time found so far, even with the
  fewest microbatch slots any longer plan could have, are dropped (treated as
  infeasible); the S loop stops when no suffix is left.

Stage sums are accumulated in chain order (first layer first): memory limits
can sit exactly on a plan's requirement (the golden instances have such), and
that rounding is what the original's results agree with.  Widths wider than the
device count are skipped; ties between widths keep the smaller one (widths
arrive ascending and only a strictly better time replaces the best).

Cost: O(W·S·L·(scan length)·K) with scans that stop early; on the 98-layer GPT-3
bench instance about 60,000 inner steps for all four widths.
"""
import numpy as np

cimport cython
from cython.parallel cimport prange
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc


cdef inline double _best_over_d(double X, double p_first, double bandwidth, int64_t dmax,
                                int64_t m, int64_t S, int64_t* d_out) noexcept nogil:
    """min over 1 ≤ d ≤ dmax of X·(⌈m/d⌉ + S − 1) + 4·(d−1)·p_first/(bandwidth·d).

    Only the smallest d of each ⌈m/d⌉ value can be optimal (the sync term grows
    with d).  With Y = 4·p_first/bandwidth the objective is at least
    X·(S−1) + Y + (X·m − Y)/d, which bounds every smaller d once X·m > Y; when
    X·m ≤ Y that bound is smallest at d = 1, where it is attained.
    """
    cdef double Y = 4.0 * p_first / bandwidth
    cdef double slope = X * <double>m - Y
    cdef double best = INFINITY, val, lb
    cdef int64_t d, c, dc, best_d = 1
    if slope <= 0.0:
        d_out[0] = 1
        return X * <double>(m + S - 1)
    d = dmax
    while d >= 1:
        c = (m + d - 1) // d
        dc = (m + c - 1) // c
        val = X * <double>(c + S - 1) + 4.0 * <double>(dc - 1) * p_first / (bandwidth * <double>dc)
        if val <= best:
            best = val
            best_d = dc
        if dc <= 1:
            break
        lb = X * <double>(S - 1) + Y + slope / <double>(dc - 1)
        if lb >= best:
            break
        d = dc - 1
    d_out[0] = best_d
    return best


cdef void solve_one(Py_ssize_t n_widths, Py_ssize_t n_layers,
                    const int64_t* widths, const double* forward_s, const double* backward_s,
                    const double* param_bytes, const double* activation_bytes,
                    const uint8_t* tensor_parallel, const double* edge_bytes,
                    int64_t devices, double memory_bytes, double bandwidth,
                    int64_t microbatches, bint recompute, bint adam,
                    double* out_time, int64_t* out_width, int64_t* out_data_parallel,
                    int64_t* out_stages, int64_t* out_stage_end, int64_t* out_stage_devices,
                    double* out_stage_load, double* out_stage_memory) noexcept nogil:
    """Solve one problem; widths must be ascending (ties keep the smaller width).

    Arrays are (n_widths, n_layers) row-major, edges (n_widths, n_layers − 1).
    On success ``out_width[0]`` is the width and the stage arrays hold S
    entries; when nothing fits ``out_time[0]`` is +inf and ``out_width[0]`` 0;
    ``out_width[0] = -1`` reports that scratch memory could not be allocated.
    """
    cdef Py_ssize_t L = n_layers, W = n_widths
    cdef Py_ssize_t w, i, j, k, kk, S, K, Kmax = 1, Smax, stride
    cdef Py_ssize_t best_w = -1, best_S = 0, best_j = 0, best_k = 0, best_K = 1, best_stride = 0
    cdef bint best_mixed = False, mixed, improved, has_tp, any_finite, fits
    cdef int64_t t, a_uni, a1, n, dmax, d, best_d = 1, cmin, cnt, m = microbatches
    cdef double mult = 3.0 if adam else 2.0
    cdef double P, A, F, B, mem, lb, load, gv, X, val, best, cap, best_time = INFINITY
    cdef const double* fw
    cdef const double* bw
    cdef const double* par
    cdef const double* act
    cdef const uint8_t* tp
    cdef const double* edge
    cdef double* tmp
    cdef int32_t* itmp
    cdef int32_t bj

    out_time[0] = INFINITY
    out_width[0] = 0
    out_data_parallel[0] = 0
    out_stages[0] = 0

    # Size of the k dimension: stages free of tensor-parallel layers matter only
    # when the flags are mixed at t > 1.
    for w in range(W):
        t = widths[w]
        if t < 1 or t > devices:
            continue
        tp = tensor_parallel + w * L
        cnt = 0
        for i in range(L):
            if not tp[i]:
                cnt += 1
        if t > 1 and 0 < cnt < L:
            K = min(cnt, min(<int64_t>L, devices)) + 1
            if K > Kmax:
                Kmax = K

    cdef double* ein = <double*>malloc(L * sizeof(double))
    cdef double* eout = <double*>malloc(L * sizeof(double))
    cdef double* inb = <double*>malloc(L * sizeof(double))
    cdef double* kap = <double*>malloc((L + 2) * sizeof(double))
    cdef double* gprev = <double*>malloc((L + 1) * Kmax * sizeof(double))
    cdef double* gcur = <double*>malloc((L + 1) * Kmax * sizeof(double))
    cdef int32_t* ch_cur = <int32_t*>malloc((L + 1) * (L + 1) * Kmax * sizeof(int32_t))
    cdef int32_t* ch_best = <int32_t*>malloc((L + 1) * (L + 1) * Kmax * sizeof(int32_t))
    if (ein == NULL or eout == NULL or inb == NULL or kap == NULL or gprev == NULL or gcur == NULL
            or ch_cur == NULL or ch_best == NULL):
        out_width[0] = -1
        free(ein); free(eout); free(inb); free(kap); free(gprev); free(gcur); free(ch_cur); free(ch_best)
        return

    for w in range(W):
        t = widths[w]
        if t < 1 or t > devices:
            continue  # fewer devices than the width: this width cannot be used
        fw = forward_s + w * L
        bw = backward_s + w * L
        par = param_bytes + w * L
        act = activation_bytes + w * L
        tp = tensor_parallel + w * L
        edge = edge_bytes + w * (L - 1)
        ein[0] = 0.0
        inb[0] = 0.0
        for i in range(1, L):
            inb[i] = edge[i - 1]
            ein[i] = edge[i - 1] / bandwidth
        for j in range(L - 1):
            eout[j] = edge[j] / bandwidth
        eout[L - 1] = 0.0
        cnt = 0
        for i in range(L):
            if not tp[i]:
                cnt += 1
        mixed = t > 1 and 0 < cnt < L
        if t == 1 or cnt == L:
            a_uni = 1
        else:
            a_uni = t
        if mixed:
            Smax = min(<int64_t>L, devices)
            K = min(cnt, <int64_t>Smax) + 1
        else:
            Smax = min(<int64_t>L, devices // a_uni)
            K = 1
        stride = (L + 1) * K
        improved = False
        # kap[S] = least microbatch-slot count ⌈m/d⌉ + S' − 1 of any plan with S' ≥ S stages.
        kap[Smax + 1] = INFINITY
        S = Smax
        while S >= 1:
            n = S if mixed else S * a_uni
            kap[S] = kap[S + 1]
            if n <= devices:
                dmax = min(m, devices // n)
                val = <double>((m + dmax - 1) // dmax + S - 1)
                if val < kap[S]:
                    kap[S] = val
            S -= 1

        # g[1]: the suffix from layer i as the last stage (position 1, plain load),
        # from running suffix sums.  Memory limits can sit exactly on a plan's
        # requirement (the golden set has such limits), so a memory test within
        # 1e-12 of the limit is redone with the sums in chain order, the rounding
        # used everywhere else (a suffix sum differs from it by ~L·1e-16).
        for k in range(K):
            gprev[L * K + k] = INFINITY
        P = 0.0; A = 0.0; F = 0.0; B = 0.0
        has_tp = False
        i = L - 1
        while i >= 0:
            P += par[i]; A += act[i]; F += fw[i]; B += bw[i]
            if tp[i]:
                has_tp = True
            mem = mult * P + A
            if mem > memory_bytes * (1.0 + 1e-12):
                fits = False
            elif mem < memory_bytes * (1.0 - 1e-12):
                fits = True
            else:
                X = 0.0; val = 0.0
                for j in range(i, L):
                    X += par[j]; val += act[j]
                fits = mult * X + val <= memory_bytes
            load = ein[i] + F + B
            for k in range(K):
                if fits and (k == 0 or (k == 1 and not has_tp)):
                    gprev[i * K + k] = load
                else:
                    gprev[i * K + k] = INFINITY
                ch_cur[stride + i * K + k] = <int32_t>(L - 1)
            i -= 1

        # S = 1: the whole chain in one stage.
        if gprev[0] < INFINITY:
            P = 0.0
            has_tp = False
            for j in range(L):
                P += par[j]
                if tp[j]:
                    has_tp = True
            n = t if (has_tp and t > 1) else 1
            dmax = min(m, devices // n)
            val = _best_over_d(gprev[0], P, bandwidth, dmax, m, 1, &d)
            if val < best_time:
                best_time = val
                best_w = w; best_S = 1; best_j = L - 1; best_k = 0; best_d = d
                improved = True

        for S in range(2, Smax + 1):
            # gprev holds g[S-1]; enumerate the first stage 0..j at position S.
            n = S if mixed else S * a_uni
            dmax = min(m, devices // n)
            if dmax < 1:
                break
            cmin = (m + dmax - 1) // dmax
            P = 0.0; A = 0.0; F = 0.0; B = 0.0
            has_tp = False
            for j in range(L - S + 1):
                P += par[j]; A += act[j]; F += fw[j]; B += bw[j]
                if tp[j]:
                    has_tp = True
                # The first stage has no incoming edge: with recomputation it stashes nothing.
                if recompute:
                    mem = mult * P + A
                else:
                    mem = mult * P + A + <double>(S - 1) * A
                if mem > memory_bytes:
                    break
                lb = F + B + (F if recompute else 0.0)
                if lb * <double>(cmin + S - 1) >= best_time:
                    break
                if recompute:
                    load = F + (F if F > eout[j] else eout[j]) + B
                else:
                    load = F + eout[j] + B
                a1 = t if (has_tp and t > 1) else 1
                for k in range(K):
                    gv = gprev[(j + 1) * K + k]
                    if gv == INFINITY:
                        break  # g is nondecreasing in k
                    X = load if load > gv else gv
                    if mixed:
                        n = a1 + (S - 1) * t - (t - 1) * k
                    else:
                        n = S * a_uni
                    if n > devices:
                        continue
                    dmax = min(m, devices // n)
                    if X * <double>((m + dmax - 1) // dmax + S - 1) >= best_time:
                        continue
                    val = _best_over_d(X, P, bandwidth, dmax, m, S, &d)
                    if val < best_time:
                        best_time = val
                        best_w = w; best_S = S; best_j = j; best_k = k; best_d = d
                        improved = True
            if S == Smax:
                break
            # g[S] from g[S-1]: the suffix from layer i, its first stage at position S.
            # A suffix value v only matters if some plan with more than S stages
            # could beat the best time found: v·(⌈m/d⌉ + S' − 1) ≥ v·kap[S+1].
            # Values at or above that cap are stored as INF (exact pruning; the
            # cap shrinks with S, so capped entries stay useless further up).
            if best_time == INFINITY:
                cap = INFINITY
            elif kap[S + 1] == INFINITY:
                break
            else:
                cap = best_time / kap[S + 1]
            any_finite = False
            for i in range((L + 1) * K):
                gcur[i] = INFINITY
            for i in range(L - S + 1):
                for k in range(K):
                    best = cap
                    bj = -1
                    P = 0.0; A = 0.0; F = 0.0; B = 0.0
                    has_tp = False
                    for j in range(i, L - S + 1):
                        P += par[j]; A += act[j]; F += fw[j]; B += bw[j]
                        if tp[j]:
                            has_tp = True
                        if recompute:
                            mem = mult * P + A + <double>(S - 1) * inb[i]
                        else:
                            mem = mult * P + A + <double>(S - 1) * A
                        if mem > memory_bytes:
                            break
                        lb = ein[i] + F + B + (F if recompute else 0.0)
                        if lb >= best:
                            break
                        kk = k
                        if mixed and not has_tp and kk > 0:
                            kk -= 1
                        gv = gprev[(j + 1) * K + kk]
                        if gv >= best:
                            continue
                        if recompute:
                            load = ein[i] + F + (F if F > eout[j] else eout[j]) + B
                        else:
                            load = ein[i] + F + eout[j] + B
                        val = load if load > gv else gv
                        if val < best:
                            best = val
                            bj = <int32_t>j
                    if bj >= 0:
                        gcur[i * K + k] = best
                        any_finite = True
                    ch_cur[S * stride + i * K + k] = bj
            tmp = gprev; gprev = gcur; gcur = tmp
            if not any_finite:
                break  # no suffix fits at this position, so none fits further up
        if improved:
            itmp = ch_best; ch_best = ch_cur; ch_cur = itmp
            best_K = K; best_stride = stride; best_mixed = mixed

    if best_w >= 0:
        w = best_w
        t = widths[w]
        fw = forward_s + w * L
        bw = backward_s + w * L
        par = param_bytes + w * L
        act = activation_bytes + w * L
        tp = tensor_parallel + w * L
        edge = edge_bytes + w * (L - 1)
        # Follow the recorded cut ends.
        out_stage_end[0] = best_j
        i = best_j + 1
        k = best_k
        for S in range(best_S - 1, 0, -1):
            j = ch_best[S * best_stride + i * best_K + k]
            out_stage_end[best_S - S] = j
            if best_mixed:
                has_tp = False
                for kk in range(i, j + 1):
                    if tp[kk]:
                        has_tp = True
                if not has_tp and k > 0:
                    k -= 1
            i = j + 1
        # Per-stage loads, memory and devices of the plan.
        i = 0
        for S in range(best_S):
            j = out_stage_end[S]
            P = 0.0; A = 0.0; F = 0.0; B = 0.0
            has_tp = False
            for kk in range(i, j + 1):
                P += par[kk]; A += act[kk]; F += fw[kk]; B += bw[kk]
                if tp[kk]:
                    has_tp = True
            X = edge[i - 1] / bandwidth if i > 0 else 0.0      # incoming-edge wait
            val = edge[j] / bandwidth if j < L - 1 else 0.0     # outgoing-edge wait
            n = best_S - S                                      # position from the end
            if recompute and n > 1:
                out_stage_load[S] = X + F + (F if F > val else val) + B
                out_stage_memory[S] = mult * P + A + <double>(n - 1) * (edge[i - 1] if i > 0 else 0.0)
            else:
                out_stage_load[S] = X + F + val + B
                out_stage_memory[S] = mult * P + A + <double>(n - 1) * (edge[i - 1] if i > 0 and recompute else A)
            out_stage_devices[S] = t if (has_tp and t > 1) else 1
            i = j + 1
        out_time[0] = best_time
        out_width[0] = t
        out_data_parallel[0] = best_d
        out_stages[0] = best_S

    free(ein); free(eout); free(inb); free(kap); free(gprev); free(gcur); free(ch_cur); free(ch_best)


@cython.boundscheck(False)
@cython.wraparound(False)
def solve_packed(const int64_t[:, ::1] widths, const double[:, :, ::1] forward_s,
                 const double[:, :, ::1] backward_s, const double[:, :, ::1] param_bytes,
                 const double[:, :, ::1] activation_bytes, const uint8_t[:, :, ::1] tensor_parallel,
                 const double[:, :, ::1] edge_bytes, const int64_t[::1] devices,
                 const double[::1] memory_bytes, const double[::1] bandwidth,
                 const int64_t[::1] microbatches, const uint8_t[::1] recompute,
                 const uint8_t[::1] adam, int num_threads=1):
    """Solve P problems packed as (P, W, L) arrays, in parallel over problems, GIL released.

    ``widths`` (P, W) ascending per problem, entries < 1 are padding (skipped).
    ``edge_bytes`` is (P, W, max(L − 1, 1)).  Returns (time, width,
    data_parallel, stages, stage_end, stage_devices, stage_load, stage_memory);
    the stage arrays are (P, L) and hold ``stages[p]`` entries per row.
    Caller (phaze.placement) validates; this function trusts its input.
    """
    cdef Py_ssize_t n_prob = forward_s.shape[0], W = forward_s.shape[1], L = forward_s.shape[2]
    cdef Py_ssize_t E = edge_bytes.shape[2]
    cdef Py_ssize_t p
    if L < 1 or W < 1:
        raise ValueError("a placement problem needs at least one layer and one width")
    if E != max(L - 1, 1):
        raise ValueError("edge_bytes must have max(L - 1, 1) columns")
    out_time = np.empty(n_prob, dtype=np.float64)
    out_width = np.empty(n_prob, dtype=np.int64)
    out_dp = np.empty(n_prob, dtype=np.int64)
    out_S = np.empty(n_prob, dtype=np.int64)
    out_end = np.zeros((n_prob, L), dtype=np.int64)
    out_dev = np.zeros((n_prob, L), dtype=np.int64)
    out_load = np.zeros((n_prob, L), dtype=np.float64)
    out_mem = np.zeros((n_prob, L), dtype=np.float64)
    cdef double[::1] t_v = out_time
    cdef int64_t[::1] w_v = out_width, d_v = out_dp, s_v = out_S
    cdef int64_t[:, ::1] end_v = out_end, dev_v = out_dev
    cdef double[:, ::1] load_v = out_load, mem_v = out_mem
    if n_prob == 0:
        return out_time, out_width, out_dp, out_S, out_end, out_dev, out_load, out_mem
    # When L == 1 the single padding column of edge_bytes is never read; the kernel
    # indexes edges with stride L - 1 within a problem.
    # One thread (or one problem) runs without an OpenMP region: waking a team
    # costs more than a whole solve on a busy machine.
    if num_threads <= 1 or n_prob == 1:
        with nogil:
            for p in range(n_prob):
                solve_one(W, L, &widths[p, 0], &forward_s[p, 0, 0], &backward_s[p, 0, 0],
                          &param_bytes[p, 0, 0], &activation_bytes[p, 0, 0], &tensor_parallel[p, 0, 0],
                          &edge_bytes[p, 0, 0], devices[p], memory_bytes[p], bandwidth[p],
                          microbatches[p], recompute[p] != 0, adam[p] != 0,
                          &t_v[p], &w_v[p], &d_v[p], &s_v[p], &end_v[p, 0], &dev_v[p, 0],
                          &load_v[p, 0], &mem_v[p, 0])
    else:
        for p in prange(n_prob, nogil=True, schedule="dynamic",
                        num_threads=min(num_threads, n_prob)):
            solve_one(W, L, &widths[p, 0], &forward_s[p, 0, 0], &backward_s[p, 0, 0],
                      &param_bytes[p, 0, 0], &activation_bytes[p, 0, 0], &tensor_parallel[p, 0, 0],
                      &edge_bytes[p, 0, 0], devices[p], memory_bytes[p], bandwidth[p],
                      microbatches[p], recompute[p] != 0, adam[p] != 0,
                      &t_v[p], &w_v[p], &d_v[p], &s_v[p], &end_v[p, 0], &dev_v[p, 0],
                      &load_v[p, 0], &mem_v[p, 0])
    if (out_width < 0).any():
        raise MemoryError("placement kernel could not allocate its scratch tables")
    return out_time, out_width, out_dp, out_S, out_end, out_dev, out_load, out_mem
