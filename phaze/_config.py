"""Every tunable of phaze in one place: solver limits, gaps, cache and chunk sizes.

Convention: a public function that takes one of these as a keyword argument
defaults it to ``None``, meaning "the value here, read when the function is
called" (so changing ``phaze._config.SCHEDULE_GAP`` at run time takes effect
everywhere); nothing else in the package hard-codes these numbers. How the
values were chosen (the measurements behind them) is in ``bench/RESULTS.md``.
"""

# --- phaze.schedule -------------------------------------------------------
#: Relative optimality gap (makespan - lower_bound) / makespan accepted as "certified".
SCHEDULE_GAP = 0.01
#: Wall-clock limit for one exact MILP solve, seconds.
SCHEDULE_TIME_LIMIT_S = 10.0
#: Entries kept in the schedule memo (content hash → Schedule) before the oldest are dropped.
SCHEDULE_MEMO_SIZE = 200_000
#: Operator graphs whose preparation (cut operators, antichain widths, reachability; about
#: 1–2 ms for a transformer block) is kept; a sweep touches about a thousand distinct graphs.
SCHEDULE_PREP_CACHE_SIZE = 4096
#: Largest part between cut operators (operators) solved exactly by branch and bound;
#: transformer forward parts have at most 7, the exhaustive search grows factorially.
SCHEDULE_EXACT_MAX_OPS = 10
#: Branch-and-bound nodes per part before giving up on proving it optimal (bounds the
#: time one hard part can take; the part keeps its list schedule and proven bound).
SCHEDULE_BNB_NODE_LIMIT = 200_000
#: Passes of single-operator mode flips (per start) in the local search that parts still
#: outside the gap get after their list schedules (each pass: one parallel schedule
#: generation per operator, a few microseconds each).
SCHEDULE_MODE_SEARCH_ROUNDS = 2
#: Branch-and-bound placements tried on a part still outside the gap after every bound
#: and heuristic (the last resort of ``schedule_many`` and of ``schedule_layer`` before
#: the MILP; about half a microsecond each). The search looks only for schedules shorter
#: than (1 - gap) x the best one, so it certifies a part when it runs out of nodes to try.
#: Only parts it cannot finish cost the whole budget; with this many every schedule of
#: ``bench/bench_schedule.py`` is certified.
SCHEDULE_OPEN_PART_NODES = 3_000_000
#: Work chunks per thread in ``schedule_many`` (threads take the next chunk when done: a
#: few hard architectures in one chunk then hold up no other thread).
SCHEDULE_CHUNKS_PER_THREAD = 16

# --- phaze.graph ----------------------------------------------------------
#: Bytes per tensor element (bf16/fp16 training) unless the caller says otherwise.
DEFAULT_BYTES_PER_ELEMENT = 2
#: Megatron pads the vocabulary to a multiple of this times the tensor-parallel width.
VOCAB_PAD_MULTIPLE = 128

# --- phaze.search ---------------------------------------------------------
#: Architectures per work chunk (the unit of parallelism, checkpointing and retry).
SEARCH_CHUNK_ARCHS = 256
#: Rows kept in a result's JSON summary.
SEARCH_TOP_ROWS = 50
#: Pruned sweeps solve a chunk's placements in batches of this many architectures (best
#: bound first), raising the chunk's floor between batches so later ones can be skipped.
SEARCH_PRUNE_BATCH = 16
#: Layer graphs (one per model × microbatch × tensor-parallel width) kept per worker.
SEARCH_LAYER_CACHE_SIZE = 64
#: Plan sets of the calibrated step search kept per process (``phaze.step``: every plan of
#: one model's variants under one set of plan settings and node sizes, shared by the
#: chunks of a sweep; one per model × microbatch × recomputation mode in a search; a few
#: MB each: 2.4 MB for gpt3-175b's 9,552 plans, 4.5 MB for mixtral-8x7b's 16,896).
STEP_PLAN_SET_CACHE_SIZE = 64
#: Operator graphs whose derived indices (names, sequence-parallel rings, overlapped
#: gathers) the step model keeps per process (by identity).
STEP_GRAPH_CACHE_SIZE = 4096
#: Per-architecture layer times kept by ``evaluate_point`` (a brute force over strategies
#: asks for the same architecture and widths many times).
SEARCH_POINT_MEMO_SIZE = 256
#: Times a chunk is run again after its worker died or raised, before the sweep gives up
#: (a lost Dask worker or a killed pool process should not cost the whole sweep).
SEARCH_CHUNK_RETRIES = 3

# --- phaze.arch -----------------------------------------------------------
#: Relative tolerance when comparing area / budget with the space's bounds: the CSV of
#: the original study keeps tpuv4 itself (ratio exactly 1.0 up to rounding of the sum).
ARCH_AREA_RATIO_RTOL = 1e-9
#: Largest knob grid (before the area filter) ArchSpace will enumerate: ~100 bytes per
#: row, so this caps the temporary at about 1 GB.
ARCH_SPACE_MAX_COMBINATIONS = 10_000_000

# --- phaze.cost -----------------------------------------------------------
#: Bytes per partial sum held in the buffer for a GEMM output tile: bf16/fp16 GEMMs
#: accumulate in fp32 (TPU MXU, tensor cores).
COST_ACCUMULATOR_BYTES = 4
#: Fraction of the shared buffer a single-core GEMM may tile with. 1.0: operators on
#: different cores take turns in the buffer (the original study's per-operator view);
#: lower it to model statically partitioned buffers. It must not depend on core counts
#: (single-core latencies are computed once per core shape and buffer).
COST_SINGLE_CORE_BUFFER_FRACTION = 1.0
#: Architecture chunks whose validated, deduplicated kernel inputs phaze.cost keeps
#: (the search evaluates dozens of operator graphs per chunk; ~15 arrays per chunk).
COST_PREPARED_CACHE_SIZE = 8
#: Operator graphs whose derived kernel inputs (operand bytes, FP8 flags, bytes moved) the
#: cost model keeps per process (by identity; a sweep prices the same graphs per chunk).
COST_GRAPH_INPUTS_CACHE_SIZE = 4096
