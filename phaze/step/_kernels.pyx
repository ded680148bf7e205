# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled arithmetic of the training-step model (Cython, ahead of time). Private: call
:func:`phaze.step.training_step` or :func:`phaze.step.best_plans`.

One definition of the step: ``training_step`` prices its layers in Python (``phaze.cost``)
and then calls :func:`step_time` and :func:`stage_memory` below for the breakdown; the
search kernel :func:`search_rows` calls the very same C functions for every plan it keeps,
so the fixed-plan path and the search cannot drift. The model itself is documented in
``phaze/step/_model.py``; the functions here are its literal transcription, in the same
order of floating-point operations as the numba kernels they replaced (bit for bit: the
reference sweeps of bench/RESULTS.md, issue 24). Every collective is priced by the C
inline functions of ``phaze/_ring.pxd`` (the formulas of :mod:`phaze.collectives`).
Integer divisions and remainders here are of non-negative operands only (C's truncation
is then Python's floor); Python's ceiling idiom ``-(-a // b)`` is written ``(a + b − 1) / b``.

The kernels take numpy records (structured dtypes, declared once below with the C
structs that read them; the import checks that each dtype is its struct's layout):

- :data:`ROW_PARAMS` — one row's collective parameters (the fields of
  ``collectives.FABRIC_DTYPE``: NCCL α parts in s, η·bandwidth of the in-node link and of
  the network in bytes/s), η·HBM bandwidth (bytes/s) and the kernel launch gap (s).
- :data:`LAYER_TIMES` — layer times of one (t, sequence parallel, flash, cp, ep) variant on
  one row (seconds, one microbatch): embedding and head forward and backward, one pipeline
  send of the boundary tensor inside a node / between nodes, and per transformer-layer kind
  k < ``K_MAX`` (``k_*[k]``: the kinds of ``phaze.graph.ModelGraph.block_kinds``, e.g. a
  dense and an MoE block, or a Mamba-2, an attention and an MLP layer) its forward,
  backward, attention core (what selective recomputation re-runs), what per-op selective
  recomputation (torchtitan's "op") re-runs, the flash-attention kernels its K/V
  exchange overlaps, and the Newton–Schulz GEMMs a Muon step runs on its weight matrices
  (``k_ns_d``: the dense ones, ``k_ns_e``: the routed experts'; 0 under Adam).
- :data:`SIZES` — one variant's sizes (bytes unless said): parameter bytes of the
  embedding and head slices, bytes per element, the boundary tensor, the tied word
  embedding (elements), the embedding's and head's stashes, the recomputation workspace,
  the number of layer kinds, the bytes of one all-to-all, the kind and number of the
  multi-token-prediction layers the last stage runs after its own (DeepSeek-V3's MTP
  modules' transformer layers; ``mtp_n`` 0 without), one copy of the routed tokens' bytes,
  the experts per token and the node limit of the routing (DeepEP's dispatch); per kind its parameter bytes
  (and its routed experts' part), its stash under the recomputation mode, its FP8 weight
  copies (of the routed experts apart), how many all-to-alls it runs forward and
  backward, and its K/V exchange bytes forward and backward.
- :data:`PLAN` — one plan: the parallel widths, virtual stages, microbatches, layers,
  ZeRO stage, overlap (0/1), recomputation code, sequence parallelism (0/1), the
  optimizer's bytes per parameter, kernels and tiny all-reduces, and the bytes per
  parameter of the gradient buffer and its data-parallel reduction (``grad_bytes``: 4 for
  fp32, 2 for a 16-bit ``grad_reduce_dtype``), overlap of the parameter all-gathers
  (``opg``, 0/1), ZeRO-3's resharding after the forward (``reshard``, 0/1), the
  pipeline split (``acct``: bit 0 when the embedding and the loss count as one layer each,
  bit 1 when the remainder goes to the first chunks, :func:`chunk_range`), and the optimizer's state bytes per parameter of the transformer
  layers and of the embedding and head (``state_bytes``, ``state_bytes_eh``: 12 for Adam's
  fp32 master weights and moments; Muon keeps one momentum and runs Adam on the embedding
  and head) and its HBM bytes per parameter of the embedding and head (``opt_bytes_eh``;
  ``opt_bytes`` the layers'), the MoE token dispatcher (``dispatch``: 0 Megatron-Core's
  all-to-all, 1 DeepEP), and the microbatches one pipeline schedule runs (``mp``: 0 = all
  m of the step, Megatron-LM's one schedule per step; else a divisor of m, the schedule
  run m/mp times, torchtitan's and NeMo AutoModel's one schedule per local batch:
  :func:`pipeline_passes`), and the bytes per parameter of the weights a rank keeps and of
  its gradients in memory (``w_bytes``, ``g_bytes``: 2 and ``grad_bytes`` with separate
  fp32 master weights; 4 and 4 when the fp32 parameters are the master weights, the plan
  knob ``master_weights`` "params": PyTorch FSDP2; ``_optim``).
- :data:`STAGE_NODES` (one per stage) and :data:`CELL_NODES` (one per plan geometry) —
  Megatron's rank layout on the row's nodes (``geometry``, ``group_geometry``):
  per stage the bit mask of the (between nodes?, receiver's tensor-parallel group spans
  2 nodes?) cases of its boundary over the data-parallel index, and the nodes spanned by
  its data-parallel ring and its worst context-parallel, expert-parallel and
  expert-data-parallel groups; per plan the nodes of the embedding all-reduce and of the
  model-parallel group.
- :data:`BREAKDOWN` (filled by :func:`step_time`) and :data:`MEMORY` (by
  :func:`stage_memory`): the outputs.
- ``kind_prefix`` (n_kinds·(L + 1),) int64, row k·(L + 1) … : how many of layers 0..i−1
  are of kind k, from which each stage's layer counts per kind follow (``stage_kinds``).

The Python-callable functions take one-element record arrays where the C function takes
one record (its outputs are written into them).
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc

from .. cimport _ring
from .._ring cimport Fabric

import numpy as np

from ..collectives import FABRIC_DTYPE

# Bytes per parameter (sheet §5.1): 16-bit weights, fp32 main gradients (the default; a
# plan's ``grad_bytes`` holds its gradient buffer's), Adam's fp32 state.
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPT_STATE_BYTES = 12

#: Recomputation modes as the kernels code them (op: torchtitan's per-op selective
#: checkpointing, the forward's elementwise operators and every second matmul re-run).
REC_NONE, REC_SELECTIVE, REC_FULL, REC_OP = 0, 1, 2, 3

# The same constants for the C code (checked equal to the Python ones at import).
cdef enum:
    W_BYTES = 2
    O_BYTES = 12
    C_REC_SELECTIVE = 1
    C_REC_FULL = 2
    C_REC_OP = 3
    KM = 4


def _fields(kind, names):
    return [(n, kind) for n in names]


#: One row's collective parameters (a ``collectives.FABRIC_DTYPE`` record and two more).
ROW_PARAMS = np.dtype(FABRIC_DTYPE.descr + [("hbm_bw", "f8"), ("launch_s", "f8")])
#: Transformer-layer kinds one model may mix (dense and MoE blocks, sliding-window and full
#: attention, Mamba-2, attention and MLP layers); a model with more is refused by the step.
K_MAX = 4
#: Layer times of one variant on one row, seconds (``k_*``: per layer kind).
LAYER_TIMES = np.dtype(_fields("f8", ("emb_f", "emb_b", "head_f", "head_b", "send_in",
                                      "send_net"))
                       + [(n, "f8", (K_MAX,)) for n in ("k_f", "k_b", "k_core", "k_op",
                                                        "k_flash_f", "k_flash_b", "k_ns_d",
                                                        "k_ns_e")])
#: Sizes of one variant (bytes; ``word_elements``, ``n_kinds`` and the all-to-all counts
#: are counts; ``k_*``: per layer kind).
SIZES = np.dtype(_fields("i8", (
    "emb_pb", "head_pb", "elem_bytes", "act_bytes", "word_elements", "emb_stash",
    "head_stash", "workspace", "n_kinds", "a2a_bytes", "mtp_kind", "mtp_n",
    "a2a_token_bytes", "topk", "node_limit"))
    + [(n, "i8", (K_MAX,)) for n in ("k_pb", "k_exp_pb", "k_stash", "k_fp8_w", "k_exp_fp8_w",
                                      "k_a2a_f_n", "k_a2a_b_n", "k_ring_f", "k_ring_b")])
#: One plan as the kernels price it.
PLAN = np.dtype([("p", "i8"), ("t", "i8"), ("d", "i8"), ("cp", "i8"), ("ep", "i8"),
                 ("v", "i8"), ("m", "i8"), ("n_layers", "i8"), ("zero", "i8"), ("ogr", "u1"),
                 ("rec_mode", "i8"), ("sp", "u1"), ("opt_bytes", "f8"), ("opt_kernels", "f8"),
                 ("n_tiny", "i8"), ("grad_bytes", "i8"), ("opg", "u1"), ("reshard", "u1"),
                 ("acct", "i8"), ("state_bytes", "f8"), ("state_bytes_eh", "f8"),
                 ("opt_bytes_eh", "f8"), ("dispatch", "u1"), ("mp", "i8"),
                 ("w_bytes", "i8"), ("g_bytes", "i8")])
#: Megatron's rank layout per stage (see the module docstring).
STAGE_NODES = np.dtype(_fields("i8", ("mask", "dp_nodes", "cp_nodes", "ep_nodes",
                                      "edp_nodes")))
#: Nodes of a plan's embedding all-reduce and model-parallel group.
CELL_NODES = np.dtype(_fields("i8", ("emb_nodes", "mp_nodes")))
#: The step's time and its parts (seconds; phaze.step.StepBreakdown has the same fields).
BREAKDOWN = np.dtype(_fields("f8", (
    "total_s", "pipeline_s", "steady_s", "bubble_s", "dp_allreduce_s", "embedding_allreduce_s",
    "optimizer_s", "slot_s", "forward_s", "backward_s", "recompute_s", "p2p_s"))
    + _fields("i8", ("microbatches", "critical_stage")))
#: Bytes held by one GPU of a stage (the count in flight a count; phaze.step.MemoryBreakdown).
MEMORY = np.dtype(_fields("i8", (
    "weights", "gradients", "optimizer_state", "activations", "activations_other", "workspace",
    "in_flight", "layer_param_state")))


cdef packed struct RowParams:
    # a Fabric (phaze/_ring.pxd, collectives.FABRIC_DTYPE), field for field
    double coll_latency_s
    double link_step_s
    double net_step_s
    double link_bw
    double net_bw
    double ll_latency_s
    double ll_link_step_s
    double ll_span_step_s
    double ll_net_step_s
    double ll_link_bw
    double ll_net2_bw
    double ll_net_bw
    double ll128_latency_s
    double ll128_link_step_s
    double ll128_net_step_s
    double ll128_share
    # the row's own
    double hbm_bw
    double launch_s

cdef packed struct LayerTimes:
    double emb_f
    double emb_b
    double head_f
    double head_b
    double send_in
    double send_net
    double k_f[KM]
    double k_b[KM]
    double k_core[KM]
    double k_op[KM]
    double k_flash_f[KM]
    double k_flash_b[KM]
    double k_ns_d[KM]
    double k_ns_e[KM]

cdef packed struct Sizes:
    int64_t emb_pb
    int64_t head_pb
    int64_t elem_bytes
    int64_t act_bytes
    int64_t word_elements
    int64_t emb_stash
    int64_t head_stash
    int64_t workspace
    int64_t n_kinds
    int64_t a2a_bytes
    int64_t mtp_kind
    int64_t mtp_n
    int64_t a2a_token_bytes
    int64_t topk
    int64_t node_limit
    int64_t k_pb[KM]
    int64_t k_exp_pb[KM]
    int64_t k_stash[KM]
    int64_t k_fp8_w[KM]
    int64_t k_exp_fp8_w[KM]
    int64_t k_a2a_f_n[KM]
    int64_t k_a2a_b_n[KM]
    int64_t k_ring_f[KM]
    int64_t k_ring_b[KM]

cdef packed struct Plan:
    int64_t p
    int64_t t
    int64_t d
    int64_t cp
    int64_t ep
    int64_t v
    int64_t m
    int64_t n_layers
    int64_t zero
    unsigned char ogr
    int64_t rec_mode
    unsigned char sp
    double opt_bytes
    double opt_kernels
    int64_t n_tiny
    int64_t grad_bytes
    unsigned char opg
    unsigned char reshard
    int64_t acct
    double state_bytes
    double state_bytes_eh
    double opt_bytes_eh
    unsigned char dispatch
    int64_t mp
    int64_t w_bytes
    int64_t g_bytes

cdef packed struct StageNodes:
    int64_t mask
    int64_t dp_nodes
    int64_t cp_nodes
    int64_t ep_nodes
    int64_t edp_nodes

cdef packed struct CellNodes:
    int64_t emb_nodes
    int64_t mp_nodes

cdef packed struct Breakdown:
    double total_s
    double pipeline_s
    double steady_s
    double bubble_s
    double dp_allreduce_s
    double embedding_allreduce_s
    double optimizer_s
    double slot_s
    double forward_s
    double backward_s
    double recompute_s
    double p2p_s
    int64_t microbatches
    int64_t critical_stage

cdef packed struct Memory:
    int64_t weights
    int64_t gradients
    int64_t optimizer_state
    int64_t activations
    int64_t activations_other
    int64_t workspace
    int64_t in_flight
    int64_t layer_param_state


cdef inline const Fabric* fab(const RowParams* rp) noexcept nogil:
    """The row's first fields are a ``Fabric`` (ROW_PARAMS = FABRIC_DTYPE + two)."""
    return <const Fabric*>rp


#: Compute beside a collective runs slower: the mean slowdown of a training step's compute
#: kernels while NCCL communication overlaps them, 18.9 % (Lee et al., "Characterizing
#: Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance
#: and Power Implications", arXiv 2507.03114, 2025: GPT and Llama layers on 4 A100, H100,
#: MI250 and MI210; docs/fidelity-sources.md §4.5). While a collective of c seconds runs
#: beside compute, the compute advances at 1/(1 + s) of its rate, so the overlap costs at
#: least c·s/(1 + s) beside compute that outlasts it (:func:`exposed`).
OVERLAP_SLOWDOWN = 0.189
cdef double KAPPA = OVERLAP_SLOWDOWN / (1.0 + OVERLAP_SLOWDOWN)


cdef inline double exposed(double c, double w) noexcept nogil:
    """Seconds a collective of ``c`` seconds adds to compute of ``w`` seconds it overlaps:
    its excess over the compute, c − w, or, when the compute outlasts it, the compute's
    slowdown while they overlap, KAPPA·c (:data:`OVERLAP_SLOWDOWN`); 0 for c = 0."""
    cdef double x = c - w, y = KAPPA * c
    return x if x > y else y


cdef inline double bucket_floor(double x, double frac) noexcept nogil:
    """The least of ``x`` seconds of bucketed data-parallel traffic (Megatron-Core's
    overlapped reduction or parameter gather) no compute hides: its last bucket's share
    ``frac`` in full, and the buckets before it at the compute's slowdown beside them
    (KAPPA of theirs). ``step_time_c`` and ``dp_tail_bound`` take the same floor."""
    return frac * x + KAPPA * (x - frac * x)


# ---------------------------------------------------------------------------
# rank layout
# ---------------------------------------------------------------------------

cdef inline int64_t span_nodes(int64_t first, int64_t stride, int64_t count,
                               int64_t node_size) noexcept nogil:
    """``_ring.span_nodes``: the nodes of the ranks first + k·stride, k < count."""
    return _ring.span_nodes(first, stride, count, node_size)


cdef void geometry_c(int64_t p, int64_t t, int64_t d, int64_t node_size, int64_t* masks,
                     int64_t* dpn, int64_t* emb_out, int64_t* mp_out) noexcept nogil:
    """Megatron's rank layout (global rank = r·t·d + j·t + i) on nodes of ``node_size``;
    with context parallelism ``d`` here is the context × data width cp·d (Megatron-Core's
    tp-cp-dp-pp order: the context index sits between tensor and data, so the cp·d ranks
    of a stage with one tensor index are r·t·cp·d + j·t + i, j < cp·d).

    ``masks[a]`` (a < p − 1: boundary a → a + 1; a = p − 1: the interleaved wrap p − 1 → 0):
    bit 2·inter + wide is set when for some data-parallel index j the boundary's send
    crosses nodes for some tensor-parallel rank (inter) and the receiver's t ranks span two
    nodes (wide; t ≤ node_size). ``dpn[r]``: nodes of stage r's data-parallel ring (ranks
    r·t·d + j·t). Writes (nodes of the embedding all-reduce between ranks 0 and
    (p − 1)·t·d, nodes of the model-parallel group r·t·d + i) to ``emb_out``, ``mp_out``.
    """
    cdef int64_t td = t * d
    cdef bint one_node = (p * td - 1) // node_size == 0
    # Both bits of a boundary depend on the sender's base a·t·d + j·t modulo node_size
    # only (the receiver's is it plus the fixed (b − a)·t·d), and j·t modulo node_size
    # repeats within node_size steps of j: j < min(d, node_size) sees every case (O(p·
    # node_size·t) per cell instead of O(p·d·t), d up to the devices).
    cdef int64_t jn = d if d < node_size else node_size
    cdef int64_t a, b, mk, j, sa, sb, i, r, lo, hi, last, mp_nodes
    cdef bint inter, wide
    for a in range(p):
        if one_node:
            masks[a] = 1
            continue
        b = a + 1 if a < p - 1 else 0
        mk = 0
        for j in range(jn):
            sa = a * td + j * t
            sb = b * td + j * t
            inter = False
            for i in range(t):
                if (sa + i) // node_size != (sb + i) // node_size:
                    inter = True
                    break
            wide = (sb + t - 1) // node_size != sb // node_size
            mk |= (<int64_t>1) << ((2 if inter else 0) + (1 if wide else 0))
            if mk == 15:
                break
        masks[a] = mk
    for r in range(p):
        dpn[r] = span_nodes(r * td, t, d, node_size)
    emb_out[0] = 1 if ((p - 1) * td) // node_size == 0 else 2
    mp_nodes = 0
    last = -1
    for r in range(p):
        lo = (r * td) // node_size
        hi = (r * td + t - 1) // node_size
        if lo <= last:
            lo = last + 1
        if hi >= lo:
            mp_nodes += hi - lo + 1
        if hi > last:
            last = hi
    mp_out[0] = mp_nodes


cdef void worst_span(int64_t p, int64_t stage_stride, int64_t j_count, int64_t j_stride,
                     int64_t i_count, int64_t stride, int64_t count, int64_t node_size,
                     int64_t* out) noexcept nogil:
    """Per stage r (``out[r]``) the most nodes spanned by one group of ``count`` ranks
    base + k·stride (k < count), over every base r·stage_stride + j·j_stride + i
    (j < j_count, i < i_count). A span depends on its base modulo node_size only, so j
    and i run over at most node_size values each."""
    cdef int64_t jn = j_count if j_count < node_size else node_size
    cdef int64_t inn = i_count if i_count < node_size else node_size
    cdef int64_t r, j, i, s, worst
    for r in range(p):
        worst = 1
        if count > 1:
            for j in range(jn):
                for i in range(inn):
                    s = span_nodes(r * stage_stride + j * j_stride + i, stride, count, node_size)
                    if s > worst:
                        worst = s
        out[r] = worst


cdef void group_geometry_c(int64_t p, int64_t t, int64_t d, int64_t cp, int64_t ep,
                           int64_t node_size, int64_t* cpn, int64_t* epn,
                           int64_t* edpn) noexcept nogil:
    """Nodes spanned, per stage r, by the worst group of three kinds in Megatron-Core's
    layouts (global rank = r·t·cp·d + j·t + i, i < t, j < cp·d; phaze/step/_model.py "Rank
    layout"): ``cpn`` the context-parallel ring (cp ranks of stride t inside each block of
    t·cp ranks: order tp-cp-dp-pp), ``epn`` the expert-parallel group (ep ranks of stride t
    inside each block of t·ep ranks: the expert order tp-ep-dp-pp with expert tensor
    parallel = t), ``edpn`` the expert-data-parallel group (cp·d/ep ranks of stride t·ep)."""
    cdef int64_t D = cp * d
    cdef int64_t S = t * D
    worst_span(p, S, d, t * cp, t, t, cp, node_size, cpn)
    worst_span(p, S, D // ep, t * ep, t, t, ep, node_size, epn)
    worst_span(p, S, ep, t, t, t * ep, D // ep, node_size, edpn)


cdef void stage_geometry_c(int64_t p, int64_t t, int64_t d, int64_t cp, int64_t ep,
                           int64_t node_size, StageNodes* stages, CellNodes* cell,
                           int64_t* buf) noexcept nogil:
    """Megatron's rank layout of a plan on nodes of ``node_size``: ``geometry_c`` and
    ``group_geometry_c`` into ``stages`` (p records) and ``cell``; ``buf``: 5·p scratch."""
    cdef int64_t* masks = buf
    cdef int64_t* dpn = buf + p
    cdef int64_t* cpn = buf + 2 * p
    cdef int64_t* epn = buf + 3 * p
    cdef int64_t* edpn = buf + 4 * p
    cdef int64_t r
    geometry_c(p, t, cp * d, node_size, masks, dpn, &cell.emb_nodes, &cell.mp_nodes)
    group_geometry_c(p, t, d, cp, ep, node_size, cpn, epn, edpn)
    for r in range(p):
        stages[r].mask = masks[r]
        stages[r].dp_nodes = dpn[r]
        stages[r].cp_nodes = cpn[r]
        stages[r].ep_nodes = epn[r]
        stages[r].edp_nodes = edpn[r]


# ---------------------------------------------------------------------------
# the step
# ---------------------------------------------------------------------------

cdef inline void chunk_range(int64_t k, int64_t p, int64_t v, int64_t n_layers, int64_t acct,
                             int64_t* lo, int64_t* hi) noexcept nogil:
    """Layers [lo, hi) of virtual stage k (k < p·v). ``acct`` bit 0 (w = 1): the embedding
    and the loss count as one layer each (Megatron-Core's
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split;
    torchtitan's first/last_stage_less_layers = 1), so the L + 2w units are split and the
    first and the last chunk hold w layers fewer; bit 1: the units need not divide, the
    first (L + 2w) mod (p·v) chunks take one more (torchtitan's
    generate_llm_fqn_per_model_part, NeMo AutoModel's generate_hf_model_fqn_per_model_part
    with w = 0). Without bit 1: (L + 2w)/(p·v) units each."""
    cdef int64_t w = acct & 1
    cdef int64_t units = n_layers + 2 * w
    cdef int64_t lc = units // (p * v)
    cdef int64_t ex = 0
    if acct & 2:
        ex = units % (p * v)
    lo[0] = k * lc + (k if k < ex else ex) - w
    hi[0] = (k + 1) * lc + (k + 1 if k + 1 < ex else ex) - w
    if lo[0] < 0:
        lo[0] = 0
    if hi[0] > n_layers:
        hi[0] = n_layers


cdef inline void stage_kinds(int64_t r, int64_t p, int64_t v, int64_t n_layers, int64_t acct,
                             const Sizes* sz, const int64_t* kind_prefix,
                             int64_t* counts) noexcept nogil:
    """Transformer layers of each kind device r holds (``counts[k]``, k < sz.n_kinds): its
    chunks c·p + r (c < v) (:func:`chunk_range`), and on the last stage the ``sz.mtp_n``
    multi-token-prediction layers of kind ``sz.mtp_kind``; ``kind_prefix[k·(L + 1) + i]``:
    layers of kind k among layers 0..i−1."""
    cdef int64_t c, k, q, lo, hi
    cdef int64_t L1 = n_layers + 1
    for q in range(sz.n_kinds):
        counts[q] = 0
    for c in range(v):
        k = c * p + r
        chunk_range(k, p, v, n_layers, acct, &lo, &hi)
        for q in range(sz.n_kinds):
            counts[q] += kind_prefix[q * L1 + hi] - kind_prefix[q * L1 + lo]
    if r == p - 1 and sz.mtp_n > 0:
        counts[sz.mtp_kind] += sz.mtp_n


cdef inline void stage_params(int64_t r, int64_t p, const int64_t* counts, const Sizes* sz,
                              int64_t* dn, int64_t* en) noexcept nogil:
    """(dense, routed-expert) parameters of stage r's slice holding ``counts[k]`` layers of
    each kind (the embedding on the first stage, the head on the last)."""
    cdef int64_t n = 0, ne = 0, q
    for q in range(sz.n_kinds):
        n += counts[q] * (sz.k_pb[q] - sz.k_exp_pb[q])
        ne += counts[q] * sz.k_exp_pb[q]
    if r == 0:
        n += sz.emb_pb
    if r == p - 1:
        n += sz.head_pb
    dn[0] = n // sz.elem_bytes
    en[0] = ne // sz.elem_bytes


cdef inline void layer_times(int64_t cp, int64_t ep, int64_t dispatch,
                             const StageNodes* stage, const LayerTimes* lt, const Sizes* sz,
                             const RowParams* rp, double* kf, double* kb) noexcept nogil:
    """Forward (``kf[k]``) and backward (``kb[k]``) seconds of one layer of each kind (one
    microbatch) on a stage whose context-parallel ring spans ``stage.cp_nodes`` nodes and
    expert-parallel group ``stage.ep_nodes``: the priced operators (``lt``), plus a kind's
    K/V exchange beside the flash attention it runs concurrently with (:func:`exposed`,
    forward and backward; the exchange ``_ring.p2p``), plus its
    all-to-alls (``_ring.split_all_to_all`` over the ep ranks: the peers in the node over
    the link, the others through each rank's own NIC; ``dispatch`` 1, DeepEP's dispatch:
    ``_ring.dedup_all_to_all``, each token once per remote node)."""
    cdef double xf, xb, a = 0.0
    cdef int64_t q
    if ep > 1 and dispatch == 1:
        a = _ring.dedup_all_to_all(<double>sz.a2a_bytes, <double>sz.a2a_token_bytes, sz.topk,
                                   sz.node_limit, ep, stage.ep_nodes, fab(rp))
    elif ep > 1:
        a = _ring.split_all_to_all(<double>sz.a2a_bytes, ep, stage.ep_nodes, fab(rp))
    for q in range(sz.n_kinds):
        kf[q] = lt.k_f[q]
        kb[q] = lt.k_b[q]
        if cp > 1 and sz.k_ring_f[q] > 0:
            xf = _ring.p2p(<double>sz.k_ring_f[q], cp, stage.cp_nodes, fab(rp))
            xb = _ring.p2p(<double>sz.k_ring_b[q], cp, stage.cp_nodes, fab(rp))
            kf[q] += exposed(xf, lt.k_flash_f[q])
            kb[q] += exposed(xb, lt.k_flash_b[q])
        if ep > 1 and (sz.k_a2a_f_n[q] > 0 or sz.k_a2a_b_n[q] > 0):
            kf[q] += <double>sz.k_a2a_f_n[q] * a
            kb[q] += <double>sz.k_a2a_b_n[q] * a


cdef inline double stage_comm(int64_t r, int64_t p, int64_t v, const double* slots) noexcept nogil:
    """Pipeline transfers of device r per microbatch: chunks c·p + r each receive from the
    previous virtual stage and send to the next (``slots[6·a + 5]``: boundary a → a + 1,
    the wrap p − 1 → 0 at a = p − 1), in chunk order."""
    cdef double comm = 0.0
    cdef int64_t c, k
    for c in range(v):
        k = c * p + r
        if k > 0:
            comm += slots[6 * ((k - 1) % p) + 5]
        if k < p * v - 1:
            comm += slots[6 * r + 5]
    return comm


cdef inline void stage_sums(int64_t r, int64_t p, const int64_t* counts, const double* kf,
                            const double* kb, const LayerTimes* lt, const Sizes* sz,
                            int64_t rec_mode, double* f, double* bw,
                            double* rec) noexcept nogil:
    """(forward, backward, recomputation) seconds per microbatch of stage r holding
    ``counts[k]`` layers of each kind whose forward/backward are (``kf[k]``, ``kb[k]``): the
    layers in kind order, the embedding on stage 0 and the head on stage p − 1; full
    recomputation re-runs the layers' forward, selective their attention cores, "op" what
    torchtitan's per-op policy re-runs (one definition for ``step_time_c`` and
    ``slot_lower_bounds``)."""
    cdef int64_t q
    f[0] = 0.0
    bw[0] = 0.0
    rec[0] = 0.0
    for q in range(sz.n_kinds):
        f[0] += <double>counts[q] * kf[q]
        bw[0] += <double>counts[q] * kb[q]
        if rec_mode == C_REC_FULL:
            rec[0] += <double>counts[q] * kf[q]
        elif rec_mode == C_REC_SELECTIVE:
            rec[0] += <double>counts[q] * lt.k_core[q]
        elif rec_mode == C_REC_OP:
            rec[0] += <double>counts[q] * lt.k_op[q]
    if r == 0:
        f[0] += lt.emb_f
        bw[0] += lt.emb_b
    if r == p - 1:
        f[0] += lt.head_f
        bw[0] += lt.head_b


cdef inline double hidden(int64_t n_kinds, const int64_t* counts, const double* c,
                          const double* w) noexcept nogil:
    """Exposed seconds of the communication of ``counts[k]`` layers of each kind (``c[k]``
    seconds per layer) that runs one layer ahead, beside the compute of the layer before it
    (``w[k]`` seconds per layer): :func:`exposed` (c, w) of every layer, plus the rest
    c − exposed of the first one (nothing runs before it; the largest of the kinds
    present, the order of the layers not being known here). With c = 0 it is 0."""
    cdef double e, out = 0.0, first = 0.0
    cdef int64_t q
    cdef bint any_ = False
    for q in range(n_kinds):
        if counts[q] <= 0:
            continue
        e = exposed(c[q], w[q])
        out += <double>counts[q] * e
        if not any_ or c[q] - e > first:
            first = c[q] - e
        any_ = True
    return out + first if any_ else 0.0


cdef inline double bucket_fraction(int64_t params, int64_t D) noexcept nogil:
    """The part of a stage's gradients in its last bucket: Megatron-Core's default bucket
    of max(40,000,000, 1,000,000 · dp) parameters (``DistributedDataParallelConfig``
    .bucket_size) over the stage's ``params``, at most 1."""
    cdef double bucket = 40000000.0
    if 1000000.0 * <double>D > bucket:
        bucket = 1000000.0 * <double>D
    if params <= 0 or bucket >= <double>params:
        return 1.0
    return bucket / <double>params


cdef double sharded_comm(int64_t r, int64_t p, const int64_t* counts, const double* kf,
                         const double* kb, const LayerTimes* lt, const Sizes* sz,
                         int64_t rec_mode, int64_t zero, bint ogr, bint opg, bint reshard,
                         int64_t gb, int64_t D, int64_t edp, int64_t dpn, int64_t edpn,
                         const Fabric* F) noexcept nogil:
    """Exposed seconds per microbatch of stage r's sharded data parallelism (ZeRO-2, ZeRO-3
    / FSDP; D > 1), the stage holding ``counts[k]`` layers of each kind of forward ``kf[k]``
    and backward ``kb[k]`` seconds. Every collective moves the bytes NCCL moves: an
    all-gather ends with each layer's whole 16-bit parameters (of the rank's
    tensor-parallel slice) on every rank, a reduce-scatter starts from the whole gradient
    (``_ring.all_gather``/``reduce_scatter``: α + (n − 1)/n · bytes / η·BW), over the
    stage's cp·d data-parallel ranks (the routed experts' over the expert-data-parallel
    ones) with every NIC of their nodes (``_ring.spread``).

    ZeRO-3: each layer's parameters are gathered before its forward and, resharded after
    it (``reshard``, FSDP's default), again before its backward (the recomputed forward of
    full recomputation runs inside the backward on the same gathered parameters). ZeRO-2
    and 3: each layer's gradients are reduce-scattered after its backward. With ``opg``
    the gathers run one layer ahead (FSDP's prefetch, forward and backward), with ``ogr``
    the reduce-scatters beside the next layer's backward: what stays exposed is
    :func:`hidden` of them against each layer's forward, or its backward with its
    recomputation; otherwise they are charged in full. The embedding's and the head's
    gathers and reductions are charged in full."""
    cdef double g[KM]
    cdef double rd[KM]
    cdef double w[KM]
    cdef double o[KM]
    cdef double cq, acc, out = 0.0
    cdef Fabric Fd = _ring.spread(F, D // dpn)
    cdef Fabric Fe = _ring.spread(F, edp // edpn)
    cdef bint z3 = zero >= 3
    cdef int64_t q, n = sz.n_kinds, e = sz.elem_bytes
    for q in range(n):
        g[q] = 0.0
        rd[q] = 0.0
        if counts[q] <= 0:
            continue
        rd[q] = _ring.reduce_scatter(<double>(gb * ((sz.k_pb[q] - sz.k_exp_pb[q]) // e)), D,
                                     dpn, &Fd)
        if sz.k_exp_pb[q] > 0:
            rd[q] += _ring.reduce_scatter(<double>(gb * (sz.k_exp_pb[q] // e)), edp, edpn, &Fe)
        if z3:
            g[q] = _ring.all_gather(<double>(W_BYTES * ((sz.k_pb[q] - sz.k_exp_pb[q]) // e)),
                                    D, dpn, &Fd)
            if sz.k_exp_pb[q] > 0:
                g[q] += _ring.all_gather(<double>(W_BYTES * (sz.k_exp_pb[q] // e)), edp, edpn,
                                         &Fe)
    if z3:
        # forward: one gather per layer
        if opg:
            out += hidden(n, counts, g, kf)
        else:
            acc = 0.0
            for q in range(n):
                acc += <double>counts[q] * g[q]
            out += acc
    # backward: the re-gathers (resharded) and the reduce-scatters, per layer
    acc = 0.0
    for q in range(n):
        w[q] = kb[q]
        if rec_mode == C_REC_FULL:
            w[q] += kf[q]
        elif rec_mode == C_REC_SELECTIVE:
            w[q] += lt.k_core[q]
        elif rec_mode == C_REC_OP:
            w[q] += lt.k_op[q]
        cq = g[q] if (z3 and reshard) else 0.0
        o[q] = (cq if opg else 0.0) + (rd[q] if ogr else 0.0)
        acc += <double>counts[q] * ((0.0 if opg else cq) + (0.0 if ogr else rd[q]))
    out += acc
    out += hidden(n, counts, o, w)
    return out + sharded_fixed(r, p, sz, zero, reshard, gb, D, dpn, F)


cdef double sharded_fixed(int64_t r, int64_t p, const Sizes* sz, int64_t zero, bint reshard,
                          int64_t gb, int64_t D, int64_t dpn, const Fabric* F) noexcept nogil:
    """The part of :func:`sharded_comm` no overlap hides, seconds per microbatch: the
    embedding's (stage 0) and the head's (stage p − 1) reduce-scatter and, ZeRO-3, their
    all-gathers (twice when resharded)."""
    cdef Fabric Fd = _ring.spread(F, D // dpn)
    cdef double out = 0.0, eh
    cdef double pe = 2.0 if reshard else 1.0
    if r == 0:
        eh = <double>(sz.emb_pb // sz.elem_bytes)
        out += _ring.reduce_scatter(<double>gb * eh, D, dpn, &Fd)
        if zero >= 3:
            out += pe * _ring.all_gather(<double>W_BYTES * eh, D, dpn, &Fd)
    if r == p - 1:
        eh = <double>(sz.head_pb // sz.elem_bytes)
        out += _ring.reduce_scatter(<double>gb * eh, D, dpn, &Fd)
        if zero >= 3:
            out += pe * _ring.all_gather(<double>W_BYTES * eh, D, dpn, &Fd)
    return out


cdef void dp_traffic(const Plan* plan, int64_t dn, int64_t en, const StageNodes* stage,
                     const Fabric* F, double* red, double* ag, double* frac) noexcept nogil:
    """The data-parallel traffic after the pipeline of a stage holding ``dn`` dense and
    ``en`` routed-expert parameters (:func:`stage_params`), before any overlap: the gradient
    reduction (``red``: ZeRO 0 all-reduce, ZeRO 1 reduce-scatter; 0 for ZeRO 2–3, reduced
    per microbatch) and the distributed optimizer's parameter all-gather (``ag``: ZeRO 1–2;
    0 otherwise), the dense parameters' over the cp·d ranks and the routed experts' over
    their cp·d/ep, with every NIC of the group's nodes (``_ring.spread``); ``frac`` the last
    bucket's share of the stage's parameters (:func:`bucket_fraction`). One definition for
    ``step_time_c`` and ``dp_tail_bound``."""
    cdef int64_t D = plan.cp * plan.d
    cdef int64_t edp = D // plan.ep
    cdef int64_t gb = plan.grad_bytes, zero = plan.zero
    cdef int64_t dpn = stage.dp_nodes, edpn = stage.edp_nodes
    cdef Fabric Fd = _ring.spread(F, D // dpn)
    cdef Fabric Fe = _ring.spread(F, edp // edpn)
    red[0] = 0.0
    ag[0] = 0.0
    if zero == 0:
        red[0] = _ring.all_reduce(<double>(gb * dn), D, dpn, &Fd)
        if en > 0:
            red[0] += _ring.all_reduce(<double>(gb * en), edp, edpn, &Fe)
    elif zero == 1 and D > 1:
        red[0] = _ring.reduce_scatter(<double>(gb * dn), D, dpn, &Fd)
        if en > 0:
            red[0] += _ring.reduce_scatter(<double>(gb * en), edp, edpn, &Fe)
    if (zero == 1 or zero == 2) and D > 1:
        ag[0] = _ring.all_gather(<double>(W_BYTES * dn), D, dpn, &Fd)
        if en > 0:
            ag[0] += _ring.all_gather(<double>(W_BYTES * en), edp, edpn, &Fe)
    frac[0] = bucket_fraction(dn + en, D)


cdef void stage_work(int64_t r, const Plan* plan, const StageNodes* stage,
                     const LayerTimes* lt, const Sizes* sz, const RowParams* rp,
                     const int64_t* kind_prefix, double* f, double* bw, double* rec,
                     double* extra) noexcept nogil:
    """Stage r's forward, backward and recomputation seconds per microbatch
    (:func:`stage_sums` of its layers' :func:`layer_times`) and its ZeRO 2–3 traffic
    (``extra``, :func:`sharded_comm`; 0 otherwise): one definition for ``step_time_c``,
    whose slot adds the pipeline transfers, and the plan search's ``stage_slot_bound``."""
    cdef int64_t D = plan.cp * plan.d
    cdef int64_t counts[KM]
    cdef double kf[KM]
    cdef double kb[KM]
    stage_kinds(r, plan.p, plan.v, plan.n_layers, plan.acct, sz, kind_prefix, counts)
    layer_times(plan.cp, plan.ep, plan.dispatch, stage, lt, sz, rp, kf, kb)
    stage_sums(r, plan.p, counts, kf, kb, lt, sz, plan.rec_mode, f, bw, rec)
    extra[0] = 0.0
    if plan.zero >= 2 and D > 1:
        extra[0] = sharded_comm(r, plan.p, counts, kf, kb, lt, sz, plan.rec_mode,
                                plan.zero, plan.ogr != 0, plan.opg != 0, plan.reshard != 0,
                                plan.grad_bytes, D, D // plan.ep, stage.dp_nodes,
                                stage.edp_nodes, fab(rp))


cdef inline int64_t stage_eh_params(int64_t r, int64_t p, const Sizes* sz) noexcept nogil:
    """Parameters of the embedding (stage 0) and the head (stage p − 1) on stage r."""
    cdef int64_t n = 0
    if r == 0:
        n += sz.emb_pb
    if r == p - 1:
        n += sz.head_pb
    return n // sz.elem_bytes


cdef double optimizer_seconds(int64_t r, const Plan* plan, int64_t dn, int64_t en,
                              int64_t shard, int64_t shard_e, const LayerTimes* lt,
                              const Sizes* sz, const int64_t* kind_prefix,
                              const RowParams* rp) noexcept nogil:
    """Stage r's optimizer step, seconds: its parameters' memory-bound update (``dn`` dense,
    ``en`` routed-expert parameters, each rank updating its 1/shard of them) at
    ``opt_bytes`` per parameter (``opt_bytes_eh`` for the embedding's and head's when they
    differ), plus the Newton–Schulz GEMMs of a Muon step on the rank's share of the layers'
    weight matrices (``k_ns_d`` over the dense shard, ``k_ns_e`` over the experts')."""
    cdef double x, ns = 0.0
    cdef int64_t eh, q
    cdef int64_t counts[KM]
    if plan.opt_bytes_eh == plan.opt_bytes:
        x = (<double>dn / <double>shard + <double>en / <double>shard_e) * plan.opt_bytes \
            / rp.hbm_bw
    else:
        eh = stage_eh_params(r, plan.p, sz)
        x = ((<double>(dn - eh) / <double>shard + <double>en / <double>shard_e)
             * plan.opt_bytes + <double>eh / <double>shard * plan.opt_bytes_eh) / rp.hbm_bw
    stage_kinds(r, plan.p, plan.v, plan.n_layers, plan.acct, sz, kind_prefix, counts)
    for q in range(sz.n_kinds):
        if lt.k_ns_d[q] > 0.0 or lt.k_ns_e[q] > 0.0:
            ns += <double>counts[q] * (lt.k_ns_d[q] / <double>shard
                                       + lt.k_ns_e[q] / <double>shard_e)
    return x + ns


cdef inline int64_t pass_microbatches(const Plan* plan) noexcept nogil:
    """Microbatches one pipeline schedule runs: ``mp``, or all m when 0 (one schedule per
    step)."""
    return plan.mp if plan.mp > 0 else plan.m


cdef inline int64_t pipeline_passes(const Plan* plan) noexcept nogil:
    """Pipeline schedules per step: m / ``mp`` (torchtitan and NeMo AutoModel run one
    schedule, with its fill and drain, per local batch of a gradient-accumulation step;
    Megatron-LM one per step)."""
    return plan.m // pass_microbatches(plan)


cdef double step_time_c(const Plan* plan, const CellNodes* cell, const StageNodes* stages,
                        const LayerTimes* lt, const RowParams* rp, const Sizes* sz,
                        const int64_t* kind_prefix, double* slots, Breakdown* bd) noexcept nogil:
    """The time of one iteration of ``plan`` (phaze/step/_model.py's model), seconds, into
    ``bd``, on the rank layout ``stages`` (p records) and ``cell``, with the variant's layer
    times ``lt``, the row's ``rp`` and the sizes ``sz``; ``slots`` (≥ p rows of 6, C order)
    receives per stage: slot, forward, backward, recomputation, transfers, and the seconds
    of boundary a's crossing. Returns the total. Gradients of the dense parameters are
    reduced over the cp·d ranks (``dp_nodes``), those of the routed experts over the
    cp·d/ep expert-data-parallel ranks (``edp_nodes``)."""
    cdef const Fabric* F = fab(rp)
    cdef int64_t p = plan.p, t = plan.t, cp = plan.cp, ep = plan.ep, v = plan.v, m = plan.m
    cdef int64_t n_layers = plan.n_layers, zero = plan.zero
    cdef bint ogr = plan.ogr != 0
    cdef bint opg = plan.opg != 0
    cdef int64_t gb = plan.grad_bytes   # bytes per parameter of the gradient reductions
    cdef int64_t D = cp * plan.d
    cdef int64_t edp = D // ep
    cdef double g1 = 0.0, g2 = 0.0, worst, x
    cdef int64_t a, mk, bit, r, dn, en, crit, shard, shard_e
    cdef double y
    cdef int64_t counts[KM]
    cdef double f, bw, rec, comm, extra, slot, steady, bubble
    cdef double dp_s, upd, red, ag, emb_s, tiny, opt_s, total, frac
    # -- one crossing per stage boundary (worst data-parallel index) ------------------
    if not plan.sp:  # with SP the boundary tensor stays split over the t ranks: no gather
        g1 = _ring.all_gather(<double>sz.act_bytes, t, 1, F)
        g2 = _ring.all_gather(<double>sz.act_bytes, t, 2, F)
    for a in range(p):
        mk = stages[a].mask
        worst = 0.0
        for bit in range(4):
            if mk & ((<int64_t>1) << bit):
                x = (lt.send_net if bit >= 2 else lt.send_in) + (g2 if bit & 1 else g1)
                if x > worst:
                    worst = x
        slots[6 * a + 5] = worst
    crit = 0
    for r in range(p):
        stage_work(r, plan, &stages[r], lt, sz, rp, kind_prefix, &f, &bw, &rec, &extra)
        comm = stage_comm(r, p, v, slots)
        slot = f + bw + rec + comm + extra
        slots[6 * r] = slot
        slots[6 * r + 1] = f
        slots[6 * r + 2] = bw
        slots[6 * r + 3] = rec
        slots[6 * r + 4] = comm
        if slot > slots[6 * crit]:
            crit = r
    slot = slots[6 * crit]
    steady = <double>m * slot
    # one fill and drain per pipeline schedule (pipeline_passes: 1 for Megatron-LM)
    bubble = <double>pipeline_passes(plan) * (<double>(p - 1) * slot / <double>v)
    # -- data-parallel reduction, tied-embedding all-reduce, optimizer ---------------
    dp_s = 0.0
    upd = 0.0
    shard = D if zero >= 1 else 1
    shard_e = edp if zero >= 1 else 1
    for r in range(p):
        stage_kinds(r, p, v, n_layers, plan.acct, sz, kind_prefix, counts)
        stage_params(r, p, counts, sz, &dn, &en)
        dp_traffic(plan, dn, en, &stages[r], F, &red, &ag, &frac)
        if ogr and zero <= 1:
            # bucketed during the last microbatch's backward: the last bucket's share
            # stays exposed however long the backward (Megatron-Core's buckets)
            # and the buckets before it slow the backward they overlap (exposed's KAPPA)
            x = red - slots[6 * r + 2] - slots[6 * r + 3]
            y = bucket_floor(red, frac)
            red = x if x > y else y
        if (zero == 1 or zero == 2) and D > 1:
            if opg:
                # bucket by bucket beside the next iteration's first forward
                x = ag - slots[6 * r + 1]
                y = bucket_floor(ag, frac)
                ag = x if x > y else y
            red += ag
        if red > dp_s:
            dp_s = red
        x = optimizer_seconds(r, plan, dn, en, shard, shard_e, lt, sz, kind_prefix, rp)
        if r == 0 or x > upd:
            upd = x
    emb_s = 0.0
    if p > 1:
        emb_s = _ring.all_reduce(<double>(gb * sz.word_elements), 2, cell.emb_nodes, F)
    tiny = _ring.all_reduce(4.0, p * t, cell.mp_nodes, F)
    opt_s = upd + plan.opt_kernels * rp.launch_s + <double>plan.n_tiny * tiny
    total = steady + bubble + dp_s + emb_s + opt_s
    bd.total_s = total
    bd.pipeline_s = steady + bubble
    bd.steady_s = steady
    bd.bubble_s = bubble
    bd.dp_allreduce_s = dp_s
    bd.embedding_allreduce_s = emb_s
    bd.optimizer_s = opt_s
    bd.slot_s = slot
    bd.forward_s = slots[6 * crit + 1]
    bd.backward_s = slots[6 * crit + 2]
    bd.recompute_s = slots[6 * crit + 3]
    bd.p2p_s = slots[6 * crit + 4]
    bd.microbatches = m
    bd.critical_stage = crit
    return total


cdef int64_t stage_memory_c(int64_t r, const Plan* plan, const Sizes* sz,
                            const int64_t* kind_prefix, Memory* out) noexcept nogil:
    """Bytes held by one GPU of stage r of ``plan`` (phaze/step/_model.py, "Memory per
    GPU") into ``out``; returns their total (all but the count in flight and the layer
    state). ZeRO shards the dense parameters' state over the cp·d ranks and the routed
    experts' over the cp·d/ep expert-data-parallel ranks."""
    # the microbatches in flight are bounded by one schedule's (pass_microbatches)
    cdef int64_t p = plan.p, v = plan.v, m = pass_microbatches(plan), ep = plan.ep
    cdef int64_t n_layers = plan.n_layers, zero = plan.zero
    # the bytes per parameter of the weights and gradients a rank keeps (16-bit weights and
    # the gradient buffer's datatype, or fp32 both where they are the master weights)
    cdef int64_t gb = plan.g_bytes, wb = plan.w_bytes
    cdef int64_t D = plan.cp * plan.d
    cdef int64_t edp = D // ep
    cdef int64_t e = sz.elem_bytes
    cdef int64_t nk = sz.n_kinds, L1 = n_layers + 1
    cdef int64_t dn, en, in_flight, act, ends_in_flight, lo, hi, chunk, c, k, q, x, fp8
    cdef int64_t other, workspace, biggest, lps
    cdef int64_t counts[KM]
    stage_kinds(r, p, v, n_layers, plan.acct, sz, kind_prefix, counts)
    # ZeRO shards: optimizer state from stage 1, gradients from 2, weights at 3.
    cdef int64_t w_div = D if zero >= 3 else 1
    cdef int64_t g_div = D if zero >= 2 else 1
    cdef int64_t o_div = D if zero >= 1 else 1
    cdef int64_t w_div_e = edp if zero >= 3 else 1
    cdef int64_t g_div_e = edp if zero >= 2 else 1
    cdef int64_t o_div_e = edp if zero >= 1 else 1
    cdef double per_param = <double>wb / <double>w_div + <double>gb / <double>g_div \
        + plan.state_bytes / <double>o_div
    cdef double per_param_e = <double>wb / <double>w_div_e + <double>gb / <double>g_div_e \
        + plan.state_bytes / <double>o_div_e
    cdef int64_t eh
    stage_params(r, p, counts, sz, &dn, &en)
    if v == 1:
        in_flight = p - r if p - r < m else m
        x = 0
        for q in range(nk):
            x += counts[q] * sz.k_stash[q]
        act = in_flight * x
        ends_in_flight = in_flight
    else:
        # Megatron's interleaved warm-up: 2(p − r − 1) + (v − 1)·p + 1 chunk-microbatches,
        # each counted at the device's heaviest chunk (exact when its chunks are alike)
        in_flight = 2 * (p - r - 1) + (v - 1) * p + 1
        if m * v < in_flight:
            in_flight = m * v
        chunk = 0
        for c in range(v):
            k = c * p + r
            chunk_range(k, p, v, n_layers, plan.acct, &lo, &hi)
            x = 0
            for q in range(nk):
                x += (kind_prefix[q * L1 + hi] - kind_prefix[q * L1 + lo]) * sz.k_stash[q]
            if k == p * v - 1 and sz.mtp_n > 0:
                x += sz.mtp_n * sz.k_stash[sz.mtp_kind]
            if x > chunk:
                chunk = x
        act = in_flight * chunk
        ends_in_flight = (in_flight + v - 1) // v
    other = 0
    if r == 0:
        other += ends_in_flight * sz.emb_stash
    if r == p - 1:
        other += ends_in_flight * sz.head_stash
    workspace = sz.workspace
    if zero >= 3 and D > 1 and plan.reshard:
        # the gathered parameters of the layer running and of the one prefetched
        biggest = 0
        for q in range(nk):
            if counts[q] > 0 and sz.k_pb[q] // e > biggest:
                biggest = sz.k_pb[q] // e
        workspace += 2 * W_BYTES * biggest
    # fp8 training: Transformer Engine's FP8 copies of the layers' GEMM weights (both
    # layouts, the ``k_*fp8_w`` sizes per layer; 0 otherwise), sharded like the weights.
    fp8 = 0
    lps = 0
    for q in range(nk):
        fp8 += <int64_t>(<double>(counts[q] * sz.k_fp8_w[q]) / <double>w_div) \
            + <int64_t>(<double>(counts[q] * sz.k_exp_fp8_w[q]) / <double>w_div_e)
        lps += <int64_t>(<double>(counts[q] * ((sz.k_pb[q] - sz.k_exp_pb[q]) // e)) * per_param) \
            + <int64_t>(<double>(counts[q] * (sz.k_exp_pb[q] // e)) * per_param_e)
    out.weights = <int64_t>(<double>(wb * dn) / <double>w_div) \
        + <int64_t>(<double>(wb * en) / <double>w_div_e) + fp8
    if zero >= 3 and D > 1 and not plan.reshard:
        # not resharded after the forward: the stage's gathered 16-bit parameters are held
        # from its forward to its backward, beside their shards
        workspace += W_BYTES * (dn + en)
    out.gradients = <int64_t>(<double>(gb * dn) / <double>g_div) \
        + <int64_t>(<double>(gb * en) / <double>g_div_e)
    if plan.state_bytes_eh == plan.state_bytes:
        out.optimizer_state = <int64_t>(plan.state_bytes * <double>dn / <double>o_div) \
            + <int64_t>(plan.state_bytes * <double>en / <double>o_div_e)
    else:
        eh = stage_eh_params(r, p, sz)
        out.optimizer_state = <int64_t>(plan.state_bytes * <double>(dn - eh) / <double>o_div) \
            + <int64_t>(plan.state_bytes_eh * <double>eh / <double>o_div) \
            + <int64_t>(plan.state_bytes * <double>en / <double>o_div_e)
    out.activations = act
    out.activations_other = other
    out.workspace = workspace
    out.in_flight = in_flight
    out.layer_param_state = lps + fp8
    return (out.weights + out.gradients + out.optimizer_state + out.activations
            + out.activations_other + out.workspace)


cdef int64_t peak_stage_memory_c(const Plan* plan, const Sizes* sz, const int64_t* kind_prefix,
                                 Memory* out) noexcept nogil:
    """The largest stage total of ``plan`` (bytes), its parts in ``out``; ties go to the
    first maximal stage (as StepResult.peak_memory picks). When every transformer layer is
    of one kind only stages 0 and p − 1 are priced: a middle stage holds fewer parameters
    (no embedding), no more microbatches in flight (in flight never grows with r), no
    embedding/head stash and the same workspace as stage 0, so it never exceeds stage 0. A
    model mixing kinds (dense and MoE layers, Mamba and attention), or a split counting the
    embedding and loss as layers or giving the remainder to the first chunks (``acct``:
    the stages hold different layer counts), has every
    stage priced."""
    cdef int64_t p = plan.p
    cdef int64_t n_layers = plan.n_layers
    cdef Memory tmp
    cdef int64_t peak = stage_memory_c(0, plan, sz, kind_prefix, out)
    cdef int64_t q, present = 0
    for q in range(sz.n_kinds):
        if kind_prefix[q * (n_layers + 1) + n_layers] > 0:
            present += 1
    # a stage-1 chunk outweighs stage 0's when the embedding counts as a layer (acct)
    cdef bint mixed = present > 1 or plan.acct != 0
    cdef int64_t r, x
    for r in range(1, p):
        if not mixed and r < p - 1:
            continue
        x = stage_memory_c(r, plan, sz, kind_prefix, &tmp)
        if x > peak:
            peak = x
            out[0] = tmp
    return peak


cdef void slot_lower_bounds(const Plan* plan, const LayerTimes* lt, const Sizes* sz,
                            const int64_t* kind_prefix, double* out) noexcept nogil:
    """Forward + backward + recomputation per microbatch with the operators' times alone,
    formed as ``step_time_c`` forms them, of stage 0 (``out[0]``), stage p − 1 (``out[1]``)
    and stage 1 (``out[2]``; 0 unless p ≥ 3): ``step_time_c``'s slot adds the exchanges'
    excess, the all-to-alls, transfers and ZeRO traffic (≥ 0) to the same sums, and is the
    max over all stages."""
    cdef int64_t p = plan.p
    cdef double f, bw, rec
    cdef int64_t q, r
    cdef int64_t rs[3]
    cdef int64_t counts[KM]
    rs[0] = 0
    rs[1] = p - 1
    rs[2] = 1
    for q in range(3):
        r = rs[q]
        out[q] = 0.0
        if r >= p or (q == 2 and p < 3):
            continue
        stage_kinds(r, p, plan.v, plan.n_layers, plan.acct, sz, kind_prefix, counts)
        stage_sums(r, p, counts, lt.k_f, lt.k_b, lt, sz, plan.rec_mode, &f, &bw, &rec)
        out[q] = f + bw + rec


cdef double stage_slot_bound(int64_t r, const Plan* pl, const StageNodes* stage,
                             const LayerTimes* lt, const Sizes* sz, const RowParams* rp,
                             const int64_t* kind_prefix) noexcept nogil:
    """Stage r's slot of a ZeRO 2–3 plan without its pipeline transfers
    (:func:`stage_work`, as ``step_time_c`` forms it; its slot adds the transfers, ≥ 0,
    before the traffic)."""
    cdef double f, bw, rec, extra
    stage_work(r, pl, stage, lt, sz, rp, kind_prefix, &f, &bw, &rec, &extra)
    return f + bw + rec + extra


cdef double plan_slot_bound(const Plan* pl, const double* s3, const Sizes* sz,
                            const StageNodes* stages, const LayerTimes* lt, const RowParams* rp,
                            const int64_t* kind_prefix) noexcept nogil:
    """A lower bound of ``step_time_c``'s slot for plan ``pl`` on one row: the largest of
    the stage bounds ``s3`` (:func:`slot_lower_bounds`) and, under ZeRO 2–3, of stages 0
    and p − 1 with their sharded traffic (:func:`stage_slot_bound`)."""
    cdef int64_t D = pl.cp * pl.d
    cdef double a = s3[0], b = s3[1], c = s3[2], best
    if pl.zero >= 2 and D > 1:
        a = stage_slot_bound(0, pl, &stages[0], lt, sz, rp, kind_prefix)
        b = a if pl.p == 1 else stage_slot_bound(pl.p - 1, pl, &stages[pl.p - 1], lt, sz, rp,
                                                 kind_prefix)
    best = a
    if b > best:
        best = b
    if c > best:
        best = c
    return best


cdef double dp_tail_bound(const Plan* pl, const Sizes* sz, const StageNodes* stages,
                          const RowParams* rp, const int64_t* kind_prefix) noexcept nogil:
    """A lower bound of ``step_time_c``'s data-parallel time after the pipeline: stage 0's
    reduction and parameter gather as it forms them, an overlapped one at its last
    bucket's share and the slowdown the buckets before it cause (what the overlap never
    hides: ``step_time_c``'s floor)."""
    cdef double red, ag, frac
    cdef int64_t dn, en
    cdef int64_t counts[KM]
    if pl.cp * pl.d <= 1:
        return 0.0
    stage_kinds(0, pl.p, pl.v, pl.n_layers, pl.acct, sz, kind_prefix, counts)
    stage_params(0, pl.p, counts, sz, &dn, &en)
    dp_traffic(pl, dn, en, &stages[0], fab(rp), &red, &ag, &frac)
    if pl.ogr and pl.zero <= 1:
        red = bucket_floor(red, frac)
    if pl.zero == 1 or pl.zero == 2:
        if pl.opg:
            ag = bucket_floor(ag, frac)
        red += ag
    return red


# ---------------------------------------------------------------------------
# the Python faces (phaze.step._model, phaze.step._plans, the tests)
# ---------------------------------------------------------------------------

def _check_prefix(const int64_t[::1] kind_prefix, Sizes[::1] sz, Py_ssize_t i,
                  int64_t n_layers):
    """A kind prefix the C functions may read with the sizes ``sz[i]``: n_kinds ≤ K_MAX rows
    of L + 1 counts, the multi-token-prediction layers of one of those kinds."""
    cdef int64_t n_kinds = sz[i].n_kinds
    assert 0 <= n_kinds <= KM, f"n_kinds {n_kinds} outside 0..{KM}"
    assert kind_prefix.shape[0] >= n_kinds * (n_layers + 1), \
        f"kind_prefix holds {kind_prefix.shape[0]} counts, {n_kinds}·({n_layers} + 1) needed"
    assert sz[i].mtp_n == 0 or 0 <= sz[i].mtp_kind < n_kinds, "mtp_kind outside the kinds"


def _check_variants(Plan[::1] plans, const int64_t[::1] plan_var, Sizes[::1] var_sizes,
                    const int64_t[::1] kind_prefix):
    """Plans of one model (one layer count) whose variants' kind counts the prefix holds."""
    cdef Py_ssize_t k, n = plans.shape[0]
    if n == 0:
        return
    for k in range(var_sizes.shape[0]):
        _check_prefix(kind_prefix, var_sizes, k, plans[0].n_layers)
    for k in range(n):
        assert plans[k].n_layers == plans[0].n_layers
        assert 0 <= plan_var[k] < var_sizes.shape[0]


def geometry(int64_t p, int64_t t, int64_t d, int64_t node_size, int64_t[::1] masks,
             int64_t[::1] dpn):
    """``geometry_c`` into ``masks`` and ``dpn`` (p each); returns (embedding all-reduce
    nodes, model-parallel group nodes)."""
    cdef int64_t emb, mp
    assert masks.shape[0] >= p and dpn.shape[0] >= p
    geometry_c(p, t, d, node_size, &masks[0], &dpn[0], &emb, &mp)
    return emb, mp


def group_geometry(int64_t p, int64_t t, int64_t d, int64_t cp, int64_t ep, int64_t node_size,
                   int64_t[::1] cpn, int64_t[::1] epn, int64_t[::1] edpn):
    """``group_geometry_c`` into ``cpn``, ``epn``, ``edpn`` (p each)."""
    assert cpn.shape[0] >= p and epn.shape[0] >= p and edpn.shape[0] >= p
    group_geometry_c(p, t, d, cp, ep, node_size, &cpn[0], &epn[0], &edpn[0])


def stage_geometry(int64_t p, int64_t t, int64_t d, int64_t cp, int64_t ep, int64_t node_size,
                   StageNodes[::1] stages, CellNodes[::1] cell):
    """Megatron's rank layout of a plan into ``stages`` (p :data:`STAGE_NODES` records)
    and ``cell`` (one :data:`CELL_NODES` record)."""
    assert stages.shape[0] >= p and cell.shape[0] >= 1
    cdef int64_t[::1] buf = np.empty(5 * p, dtype=np.int64)
    stage_geometry_c(p, t, d, cp, ep, node_size, &stages[0], &cell[0], &buf[0])


def step_time(Plan[::1] plan, CellNodes[::1] cell, StageNodes[::1] stages, LayerTimes[::1] lt,
              RowParams[::1] rp, Sizes[::1] sz, const int64_t[::1] kind_prefix,
              double[:, ::1] slots, Breakdown[::1] bd):
    """``step_time_c`` of one plan (one-element record arrays; ``bd`` receives the
    breakdown, ``slots`` (≥ p, 6) the per-stage parts); returns the total, seconds."""
    assert stages.shape[0] >= plan[0].p and slots.shape[0] >= plan[0].p \
        and slots.shape[1] == 6
    _check_prefix(kind_prefix, sz, 0, plan[0].n_layers)
    return step_time_c(&plan[0], &cell[0], &stages[0], &lt[0], &rp[0], &sz[0],
                       &kind_prefix[0], &slots[0, 0], &bd[0])


def stage_memory(int64_t r, Plan[::1] plan, Sizes[::1] sz, const int64_t[::1] kind_prefix,
                 Memory[::1] out):
    """``stage_memory_c`` of stage r into ``out`` (one record); returns the total, bytes."""
    assert 0 <= r < plan[0].p
    _check_prefix(kind_prefix, sz, 0, plan[0].n_layers)
    return stage_memory_c(r, &plan[0], &sz[0], &kind_prefix[0], &out[0])


def peak_stage_memory(Plan[::1] plan, Sizes[::1] sz, const int64_t[::1] kind_prefix,
                      Memory[::1] out):
    """``peak_stage_memory_c`` of one plan; its parts into ``out``; returns the peak, bytes."""
    _check_prefix(kind_prefix, sz, 0, plan[0].n_layers)
    return peak_stage_memory_c(&plan[0], &sz[0], &kind_prefix[0], &out[0])


def plan_memory(Plan[::1] plans, const int64_t[::1] plan_var, Sizes[::1] var_sizes,
                const int64_t[::1] kind_prefix):
    """The peak stage memory of every plan (bytes, float64): it does not depend on the row."""
    cdef Py_ssize_t k, n = plans.shape[0]
    _check_variants(plans, plan_var, var_sizes, kind_prefix)
    out = np.empty(n)
    cdef double[::1] o = out
    cdef Memory mem
    with nogil:
        for k in range(n):
            o[k] = <double>peak_stage_memory_c(&plans[k], &var_sizes[plan_var[k]],
                                               &kind_prefix[0], &mem)
    return out


cdef inline int64_t plan_vs(int64_t p, int64_t m, int64_t n_layers, const int64_t[::1] vs,
                            bint vs_all, int64_t* out) noexcept nogil:
    """Virtual-stage counts Megatron allows for (p, m) from the grid (or all), ascending,
    into ``out``; returns how many."""
    cdef int64_t k = 0, i, v
    cdef int64_t top = n_layers // p if vs_all else vs.shape[0]
    for i in range(top):
        v = i + 1 if vs_all else vs[i]
        if v == 1 or (p >= 2 and n_layers % (p * v) == 0 and m % p == 0):
            out[k] = v
            k += 1
    return k


def enumerate_plans(const int64_t[::1] var_g, int64_t nv, const int64_t[::1] grp_t,
                    const int64_t[::1] grp_cp, const int64_t[::1] grp_ep,
                    const int64_t[::1] ps, const int64_t[::1] ds, int64_t devices,
                    int64_t global_batch, int64_t microbatch, int64_t n_layers,
                    const int64_t[::1] vs, bint vs_all, const int64_t[::1] zeros,
                    const unsigned char[::1] ogrs, bint launchable, bint z3_anywhere=True):
    """Every plan in the documented loop order: variant (t, SP, flash, cp, ep; ``var_g``
    its (t, cp, ep) group index into ``grp_*``), p, d, v, ZeRO stage (only the first at
    cp·d = 1, where all stages are one plan), overlap. Rules: t·cp·p·d ≤ devices, ep
    divides cp·d; with ``launchable`` no ZeRO stage 2 over more than one rank with
    pipeline or context parallelism (no trainer launches it: Megatron-LM has ZeRO 0–1
    only, DeepSpeed refuses stages 2–3 with a pipeline and has no ring attention,
    torchtitan has no stage 2), nor stage 3 there unless ``z3_anywhere`` (torchtitan's
    FSDP2 runs beside any pipeline and context parallelism where it accepts the plan's
    datatypes).
    Returns the plans' columns (variant, p, d, v, zero, overlap, m, geometry cell) and the
    geometry cells' (t, cp, ep, p, d) — one cell per group × p × d."""
    cdef Py_ssize_t ng = grp_t.shape[0], n_ps = ps.shape[0], n_ds = ds.shape[0]
    cdef Py_ssize_t n_cells = ng * n_ps * n_ds
    geo = np.empty((5, n_cells), dtype=np.int64)
    cdef int64_t[:, ::1] g = geo
    cdef Py_ssize_t gi, pi, di, c, k, vi, zi, oi, nz
    cdef int64_t t, cp, ep, p, d, m, nvs, count
    for gi in range(ng):
        for pi in range(n_ps):
            for di in range(n_ds):
                c = (gi * n_ps + pi) * n_ds + di
                g[0, c] = grp_t[gi]
                g[1, c] = grp_cp[gi]
                g[2, c] = grp_ep[gi]
                g[3, c] = ps[pi]
                g[4, c] = ds[di]
    vbuf_a = np.empty(max(n_layers, vs.shape[0]) + 1, dtype=np.int64)
    cdef int64_t[::1] vbuf = vbuf_a
    cols_a = np.empty((8, 0), dtype=np.int64)
    cdef int64_t[:, ::1] cols = cols_a
    cdef int fill
    for fill in range(2):  # count, then fill
        count = 0
        for k in range(nv):
            gi = var_g[k]
            t = grp_t[gi]
            cp = grp_cp[gi]
            ep = grp_ep[gi]
            for pi in range(n_ps):
                p = ps[pi]
                for di in range(n_ds):
                    d = ds[di]
                    if t * cp * p * d > devices:
                        break
                    if (cp * d) % ep:
                        continue
                    m = global_batch // (microbatch * d)
                    nvs = plan_vs(p, m, n_layers, vs, vs_all, &vbuf[0])
                    nz = zeros.shape[0] if cp * d > 1 else 1
                    for vi in range(nvs):
                        for zi in range(nz):
                            if launchable and (p > 1 or cp > 1) and cp * d > 1 \
                                    and (zeros[zi] == 2
                                         or (zeros[zi] >= 3 and not z3_anywhere)):
                                continue
                            for oi in range(ogrs.shape[0]):
                                if fill:
                                    cols[0, count] = k
                                    cols[1, count] = p
                                    cols[2, count] = d
                                    cols[3, count] = vbuf[vi]
                                    cols[4, count] = zeros[zi]
                                    cols[5, count] = 1 if ogrs[oi] else 0
                                    cols[6, count] = m
                                    cols[7, count] = (gi * n_ps + pi) * n_ds + di
                                count += 1
        if not fill:
            cols_a = np.empty((8, count), dtype=np.int64)
            cols = cols_a
    return (cols_a[0], cols_a[1], cols_a[2], cols_a[3], cols_a[4], cols_a[5] == 1,
            cols_a[6], cols_a[7], geo[0], geo[1], geo[2], geo[3], geo[4])


cdef inline bint cell_ok(int64_t t, int64_t cp, int64_t ep, int64_t p, int64_t d,
                         int64_t node_size, int64_t devices) noexcept nogil:
    return t * cp * p * d <= devices and t <= node_size and (cp * d) % ep == 0


def build_geometry(const int64_t[::1] geo_t, const int64_t[::1] geo_cp,
                   const int64_t[::1] geo_ep, const int64_t[::1] geo_p,
                   const int64_t[::1] geo_d, const int64_t[::1] ns_values, int64_t devices):
    """The rank layout of every valid cell (t, cp, ep, p, d) on every distinct node size:
    offsets (cells, sizes) into the flat :data:`STAGE_NODES` array (p records per cell and
    size), that array, and the :data:`CELL_NODES` records (cells, sizes)."""
    cdef Py_ssize_t n_cells = geo_t.shape[0], nns = ns_values.shape[0], c, s, k
    off_a = np.zeros((n_cells, nns), dtype=np.int64)
    cdef int64_t[:, ::1] off = off_a
    cdef int64_t total = 0, max_p = 1
    for c in range(n_cells):
        if geo_p[c] > max_p:
            max_p = geo_p[c]
        for s in range(nns):
            off[c, s] = total
            if cell_ok(geo_t[c], geo_cp[c], geo_ep[c], geo_p[c], geo_d[c], ns_values[s],
                       devices):
                total += geo_p[c]
    stages_a = np.zeros(total, dtype=STAGE_NODES)
    cells_a = np.zeros((n_cells, nns), dtype=CELL_NODES)
    cdef StageNodes[::1] stages = stages_a
    cdef CellNodes[:, ::1] cells = cells_a
    cdef int64_t[::1] buf = np.empty(5 * max_p, dtype=np.int64)
    for k in range(total):
        stages[k].cp_nodes = 1
        stages[k].ep_nodes = 1
        stages[k].edp_nodes = 1
    for c in range(n_cells):
        for s in range(nns):
            cells[c, s].emb_nodes = 1
            cells[c, s].mp_nodes = 1
            if cell_ok(geo_t[c], geo_cp[c], geo_ep[c], geo_p[c], geo_d[c], ns_values[s],
                       devices):
                stage_geometry_c(geo_p[c], geo_t[c], geo_d[c], geo_cp[c], geo_ep[c],
                                 ns_values[s], &stages[off[c, s]], &cells[c, s], &buf[0])
    return off_a, stages_a, cells_a


def search_rows(Plan[::1] plans, const int64_t[::1] plan_var, const int64_t[::1] plan_geo,
                const int64_t[::1] plan_slot, const int64_t[::1] slot_plan,
                const double[::1] plan_peak, Sizes[::1] var_sizes,
                const unsigned char[:, ::1] var_ok, LayerTimes[:, ::1] lt_rows,
                RowParams[::1] rp, const double[::1] cap, const int64_t[::1] row_nsi,
                const int64_t[:, ::1] geo_off, StageNodes[::1] geo_stages,
                CellNodes[:, ::1] geo_cells, const int64_t[::1] kind_prefix,
                int64_t[::1] best_idx, Breakdown[::1] best_bd):
    """Per row, the feasible plan of least time (index into ``plans``, :data:`PLAN`
    records, or −1) and its breakdown (``best_bd``, :data:`BREAKDOWN` records). Exact
    branch and bound: every plan whose class bound (m + (p−1)/v)·max ``slot_lower_bounds``
    and then its own bound (m + (p−1)/v)·``plan_slot_bound`` + ``dp_tail_bound`` do not
    exceed the best time found is priced with ``step_time_c``; the plan of least class
    bound is priced first. Ties go to the lower index. ``var_ok`` (variants, rows):
    whether the variant may run on the row (0/1). ``plan_slot``: per plan the index of its
    (variant, p, v) class, whose plans share one ``slot_lower_bounds`` (it reads nothing
    else of the plan: the recomputation mode and the layers are the same for all plans),
    and ``slot_plan`` one plan of each class: those stage bounds are formed once per class
    and row; a ZeRO 2–3 plan's end stages and every plan's data-parallel tail per plan. Returns (plans bounded, plans priced)
    over all rows: the plans whose bound was formed (the variant runs on the row and the
    plan fits in its memory) and those of them priced in full."""
    cdef Py_ssize_t n_plans = plans.shape[0], n_rows = rp.shape[0]
    cdef Py_ssize_t n_slots = slot_plan.shape[0]
    cdef Py_ssize_t row, k, step, vi, c, o, seed, bi, q
    cdef int64_t nsi, p
    cdef double seed_lb, s, lb, best, total
    cdef const Plan* pl
    cdef Breakdown bd
    cdef int64_t n_bounded = 0, n_priced = 0
    assert best_idx.shape[0] >= n_rows and best_bd.shape[0] >= n_rows
    assert kind_prefix.shape[0] >= 1 and plan_slot.shape[0] == n_plans
    cdef int64_t max_p = 1
    _check_variants(plans, plan_var, var_sizes, kind_prefix)
    for k in range(n_plans):
        assert 0 <= plan_slot[k] < n_slots
        if plans[k].p > max_p:
            max_p = plans[k].p
    for q in range(n_slots):
        assert 0 <= slot_plan[q] < n_plans
    cdef double* lbs = <double*>malloc((n_plans + 1) * sizeof(double))
    cdef double* slots = <double*>malloc(max_p * 6 * sizeof(double))
    cdef double* sval = <double*>malloc(4 * (n_slots + 1) * sizeof(double))
    # per plan, the class bound's factors as doubles (m, p − 1, v), read without the record
    cdef double* pmv = <double*>malloc(3 * (n_plans + 1) * sizeof(double))
    if lbs == NULL or slots == NULL or sval == NULL or pmv == NULL:
        free(lbs)
        free(slots)
        free(sval)
        free(pmv)
        raise MemoryError("phaze.step: no memory for the plan search's bounds")
    for k in range(n_plans):
        pmv[3 * k] = <double>plans[k].m
        pmv[3 * k + 1] = <double>(plans[k].p - 1)
        pmv[3 * k + 2] = <double>plans[k].v
    try:
        with nogil:
            for row in range(n_rows):
                nsi = row_nsi[row]
                seed = -1
                seed_lb = INFINITY
                for q in range(n_slots):
                    k = slot_plan[q]
                    vi = plan_var[k]
                    if var_ok[vi, row]:
                        slot_lower_bounds(&plans[k], &lt_rows[vi, row], &var_sizes[vi],
                                          &kind_prefix[0], &sval[4 * q])
                        s = sval[4 * q]
                        if sval[4 * q + 1] > s:
                            s = sval[4 * q + 1]
                        if sval[4 * q + 2] > s:
                            s = sval[4 * q + 2]
                        sval[4 * q + 3] = s
                for k in range(n_plans):
                    vi = plan_var[k]
                    if not var_ok[vi, row] or plan_peak[k] > cap[row]:
                        lbs[k] = INFINITY
                        continue
                    s = sval[4 * plan_slot[k] + 3]
                    lb = pmv[3 * k] * s + pmv[3 * k + 1] * s / pmv[3 * k + 2]
                    lbs[k] = lb
                    n_bounded += 1
                    if lb < seed_lb:
                        seed_lb = lb
                        seed = k
                best = INFINITY
                bi = -1
                if seed < 0:
                    best_idx[row] = -1
                    continue
                for step in range(n_plans + 1):
                    k = seed if step == 0 else step - 1
                    if k < 0 or (step > 0 and k == seed) or not lbs[k] <= best:
                        continue
                    vi = plan_var[k]
                    pl = &plans[k]
                    p = pl.p
                    c = plan_geo[k]
                    o = geo_off[c, nsi]
                    if step > 0:
                        # the plan's own bound, formed only for the plans the class bound
                        # lets through: its end stages' ZeRO 2–3 traffic and its
                        # data-parallel tail
                        s = plan_slot_bound(pl, &sval[4 * plan_slot[k]], &var_sizes[vi],
                                            &geo_stages[o], &lt_rows[vi, row], &rp[row],
                                            &kind_prefix[0])
                        lb = <double>pl.m * s + <double>(p - 1) * s / <double>pl.v
                        lb = lb + dp_tail_bound(pl, &var_sizes[vi], &geo_stages[o], &rp[row],
                                                &kind_prefix[0])
                        if not lb <= best:
                            continue
                    total = step_time_c(pl, &geo_cells[c, nsi], &geo_stages[o],
                                        &lt_rows[vi, row], &rp[row], &var_sizes[vi],
                                        &kind_prefix[0], slots, &bd)
                    n_priced += 1
                    if total < best or (total == best and k < bi):
                        best = total
                        bi = k
                        best_bd[row] = bd
                best_idx[row] = bi
    finally:
        free(lbs)
        free(slots)
        free(sval)
        free(pmv)
    return n_bounded, n_priced


def _check_records():
    """Each dtype above is its C struct's layout (Cython's buffer check raises otherwise)."""
    cdef RowParams[::1] a = np.zeros(1, ROW_PARAMS)
    cdef LayerTimes[::1] b = np.zeros(1, LAYER_TIMES)
    cdef Sizes[::1] c = np.zeros(1, SIZES)
    cdef Plan[::1] d = np.zeros(1, PLAN)
    cdef StageNodes[::1] e = np.zeros(1, STAGE_NODES)
    cdef CellNodes[::1] f = np.zeros(1, CELL_NODES)
    cdef Breakdown[::1] g = np.zeros(1, BREAKDOWN)
    cdef Memory[::1] h = np.zeros(1, MEMORY)
    assert sizeof(Fabric) == FABRIC_DTYPE.itemsize
    assert (W_BYTES, O_BYTES, C_REC_SELECTIVE, C_REC_FULL, C_REC_OP, KM) == (
        WEIGHT_BYTES, OPT_STATE_BYTES, REC_SELECTIVE, REC_FULL, REC_OP, K_MAX)


_check_records()
