"""The joint sweep: accelerator architecture × training knobs × device placement
(docs/design.md §2.7–2.8).

:func:`search` evaluates every architecture of a space with every microbatch,
HBM capacity and recomputation setting: operator latencies → layer schedules →
the exact placement over all valid tensor-parallel widths → samples/s =
global_batch / time per batch (tokens/s = samples/s × sequence length). The
work is cut into chunks of architectures (``_config.SEARCH_CHUNK_ARCHS``) that
run on a local process pool (default), in this process, or on a Dask cluster
(``_executors``), each chunk's work in ``_chunk``; their rows are written to the
result file one by one (``_files``, resumable), then the best point and the
baselines are chosen (``_report``, ``_baselines``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time

import numpy as np

from .. import __version__, _config
from .. import arch as _arch
from .. import plan as _plan
from .. import step
from ..arch import resolve_chip
from ..precision import is_low_precision
from .._validate import (MAX_DEVICES, MAX_GLOBAL_BATCH, nonneg_float, one_of, positive_float,
                         positive_int)
from . import _calibrated, _chunk, _executors, _files, _reduced, _replay
from ._models import cost_model
from ._baselines import baselines as run_baselines
from ._baselines import chunk_block_argmin
from ._inputs import (check_expert_grid, check_some_width, int_tuple, resolve_hbm,
                      resolve_models, resolve_prune, resolve_recompute, resolve_space,
                      resolve_strategy_grids, space_ids, valid_widths)
from ._report import SearchResult, choose_best, per_arch, pruned_min_area
from ._settings import ChunkTask, SearchSettings
from ._table import ARCH_FIELDS, OBJECTIVES, concat_tables, expand, fill_mfu, recompute_rank, take


def _columns(stream) -> int:
    """Columns of the terminal ``stream`` writes to (80 when it cannot tell)."""
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError, TypeError):
        return 80


class _Progress:
    """The sweep's progress on stderr, through ``tqdm``: percent of the points done
    (evaluated or pruned), elapsed time, ETA, the rate of *evaluated* points (pruned
    points are counted apart, not in the rate) and the best samples/s so far.

    On a terminal: tqdm's one self-updating line. Elsewhere (``--progress`` into a log
    file or pipe): plain lines, each a complete record, at a bounded rate — one when the
    sweep crosses each ``LOG_EVERY_FRACTION`` of the points or ``LOG_EVERY_S`` seconds
    have passed since the last line, whichever comes first, and one at the end.
    """

    #: Plain-line mode: a line per this fraction of the points ...
    LOG_EVERY_FRACTION = 0.10
    #: ... or after this many seconds without one.
    LOG_EVERY_S = 60.0
    _FORMAT = "{desc} {percentage:3.0f}% {n_fmt}/{total_fmt} points [{elapsed}<{remaining}{postfix}]"

    def __init__(self, total_points, enabled, stream=None):
        self.total = int(total_points)
        self.enabled = bool(enabled)
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.done = 0          # evaluated + pruned points
        self.evaluated = 0
        self.pruned = 0
        self.best = 0.0
        self._bar = None
        self._plain = False
        self._last_line = self.start
        self._last_step = 0
        if not self.enabled:
            return
        isatty = getattr(self.stream, "isatty", None)
        # a terminal of no width (a pane squeezed to 0 columns) draws no bar: plain lines
        self._plain = not (callable(isatty) and isatty()) or _columns(self.stream) < 1
        if not self._plain:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, file=self.stream, desc="phaze search",
                             bar_format=self._FORMAT.replace("{desc} ", "{desc} {bar:20} "),
                             mininterval=0.5, dynamic_ncols=True, leave=True)

    def _postfix(self, elapsed) -> str:
        rate = self.evaluated / elapsed if elapsed > 0 else 0.0
        best = f"{self.best:,.1f} samples/s" if self.best > 0 else "none yet"
        pruned = f", {self.pruned:,} pruned" if self.pruned else ""
        return f"{rate:,.0f} evaluated points/s{pruned}, best {best}"

    def update(self, evaluated, pruned, best):
        """A finished chunk: ``evaluated`` and ``pruned`` points, the best samples/s so far
        (0: none yet, or several models)."""
        evaluated, pruned = int(evaluated), int(pruned)
        self.evaluated += evaluated
        self.pruned += pruned
        self.done += evaluated + pruned
        self.best = max(self.best, float(best))
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(now - self.start), refresh=False)
            self._bar.update(evaluated + pruned)
            return
        step = int(self.done / self.total / self.LOG_EVERY_FRACTION) if self.total else 0
        if step > self._last_step or now - self._last_line >= self.LOG_EVERY_S:
            self._line(now)
            self._last_step = step

    def _line(self, now) -> None:
        from tqdm import tqdm

        elapsed = now - self.start
        text = tqdm.format_meter(self.done, self.total, elapsed, prefix="phaze search",
                                 bar_format=self._FORMAT, postfix=self._postfix(elapsed))
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_line = now

    def close(self):
        """End the display (plain mode: a last line unless the last one already said 100 %
        or there was nothing to do, as when a resumed sweep had every chunk)."""
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(time.perf_counter() - self.start),
                                      refresh=False)
            self._bar.close()
            self._bar = None
        elif (self.enabled and self._plain and self.total
              and self._last_step * self.LOG_EVERY_FRACTION < 1.0 - 1e-9):
            self._line(time.perf_counter())
            self._last_step = int(round(1.0 / self.LOG_EVERY_FRACTION))


class _Unset(tuple):
    """A default argument that reads as its value but tells that it was not given."""


#: hbm_gib's default: the study's capacities for a space, each chip's own with ``arch``.
_STUDY_HBM_GIB = _Unset((32, 64, 80))


def search(models, devices=1024, global_batch=4096, microbatch=(1, 2, 4, 8),
           hbm_gib=_STUDY_HBM_GIB, recompute=None, tensor_parallel=(1, 2, 4, 8),
           space=None, optimizer=None, prune=False, executor=None, progress=None, *, out=None,
           resume=False, workers=None, address=None, gap=None, chunk_archs=None, baselines=True,
           force=False, arch=None, seq_len=None, study=False, provenance=None, trainers=(),
           max_power_w=None, objective="throughput", max_area_mm2=None,
           **knobs) -> SearchResult:
    """Search architectures and training plans jointly for the highest training throughput.

    ``models``: a zoo name, a ModelSpec or a list of them (several: one architecture
    for all, maximising the mean of each model's throughput normalised to its best).
    ``devices``: identical chips; ``global_batch``: samples per batch; ``microbatch``
    (samples, each must divide global_batch), ``hbm_gib`` (GiB per chip, overriding the
    rows' own; None keeps each row's), ``recompute`` (modes "none", "selective",
    "full" or a list of them; True = "full", False = "none"; None: every mode the cost
    model has) and ``tensor_parallel`` (widths t; invalid ones — not dividing heads and
    kv_heads — are skipped and recorded): the knob grids; a result row is one
    architecture × model × microbatch × HBM × recomputation mode.

    Cost model: by default the calibrated Megatron-LM training step
    (``phaze.step.best_plans``: even pipeline stages, Adam with mixed precision), which
    also searches, inside each row, the strategy knobs of ``phaze.plan.GRIDS`` (keyword-only,
    the signature lists them; each a value or a list of values, None: every value — both
    switches, every ZeRO stage, every valid virtual-stage, expert- and context-parallel
    width per model, ``phaze.step.best_plans``' defaults; a dense model has ep = 1) and
    records the values chosen; the one-value knobs: the MoE capacity factor (None:
    balanced routing) and the precision ("bf16" default, "fp16", "fp8"). ``study=True``:
    the original study's model (operator schedules and the placement DP over
    unconstrained plans) with its knob set (recomputation none/full, no other knob), which
    reproduces the study's results; the knob arguments must then be left out.
    ``metadata["cost_model"]`` says which ran ("calibrated" or "study").

    ``space``: an ArchSpace, structured rows or a preset name (default
    ``ArchSpace.default()``). ``optimizer``: 'sgd' or 'adam' (default: the study's 'sgd'
    with ``study=True``; the calibrated model prices Adam only). ``prune``:
    False (every point), True or "best" (skip points whose valid throughput upper
    bound is below the best found: the best is unchanged, the Pareto front may be
    partial and ``metadata["pareto_exact"]`` is False) or "front" (skip a point only
    when an evaluated architecture of no more area beats its bound — several models:
    in every model — so the best and the throughput-vs-area Pareto front are
    unchanged). ``executor``: None/'process' (local pool, ``workers`` processes,
    default all cores; a script that calls search() outside an ``if __name__ ==
    "__main__":`` block runs in this process instead, with one sentence on stderr,
    because spawned workers re-import the script), 'serial' (this process) or 'dask'
    (needs ``address``, tcp://HOST:PORT; giving ``address`` implies it). ``progress``:
    print progress on stderr (default: when stderr is a terminal). ``out``: result
    file written chunk by chunk (.csv, .csv.gz, .json, .parquet); ``resume`` continues
    it, ``force`` replaces an existing one (without either an existing file is an
    error; a file another search is writing is refused in any case: it is locked). ``gap``:
    accepted schedule gap (default ``_config.SCHEDULE_GAP``). ``baselines``: also
    evaluate the three baselines of docs/design.md §2.8. ``seq_len``: tokens per sample
    for every model (default: each model's own; a Hugging Face config's own is its
    context length, often far longer than a training run's).

    ``arch``: one fixed system instead of a space — a preset name, a chip file (JSON, see
    ``phaze.arch.load_chip``), a ``phaze.arch.Chip`` or one architecture row. Only the
    training knobs and the placement are searched (one architecture: seconds); ``space``
    must then be None, ``hbm_gib`` defaults to the chip's own capacity, no baselines run
    (each compares architectures) and ``metadata["inputs"]["arch"]`` names the chip.

    Throughput: samples/s = global_batch / time per batch (seconds), tokens/s =
    samples/s × the model's seq_len.

    ``trainers``: trainer names (``phaze.plan.TRAINERS`` ids or emit names; () any
    trainer): search only the plans one of them launches (``phaze search --emit``); on a
    fixed ``arch`` whose file states a platform, a trainer that does not run on it is
    dropped, and none left is ``ValueError`` (``phaze.plan.platform_refusal``).

    Power and cost (issue 28): ``max_power_w`` is one chip's power budget (default: the
    calibrated model's, ``phaze.arch.TEMPLATE_TDP_W``, the TPUv4-class budget; a fixed
    ``arch``'s own rule, ``phaze.step.template_cap``; the study's model: none, so its
    results stay the study's): a point whose step needs more runs at the clock the cap
    leaves, or is infeasible. Rows carry power_w, energy_per_step_j, tokens_per_joule,
    chip_cost_usd and usd_per_million_tokens. ``objective``: "throughput" (default),
    "perf-per-watt" (most tokens per joule) or "perf-per-dollar" (least $ per million
    tokens) ranks the rows and picks the best; pruning bounds throughput, so the other two
    need ``prune`` off. ``max_area_mm2``: search only the rows of the space of at most that
    area (the template's mm², the study's area model; None: the space as given — the
    default space is the study's, within TPU v4's area).

    ``metadata["run"]`` records what repeats the run (``_replay.run_record``: the time,
    phaze's version and git commit, every ModelSpec, the chip); ``provenance`` (a dict:
    ``command``, ``config_paths``, ``space_every``, ``from_meta``) adds what only the
    caller knows (``phaze search`` passes its command line).
    """
    wall0 = time.perf_counter()
    model_list = resolve_models(models, seq_len)
    chip = None
    if arch is not None:
        if space is not None:
            raise ValueError("give space or arch, not both: arch fixes the system to one chip")
        chip = resolve_chip(arch)
        space, baselines = chip.row, False
        if isinstance(hbm_gib, _Unset):
            hbm_gib = None  # the chip's own capacity
    devices = positive_int("devices", devices, maximum=MAX_DEVICES)
    global_batch = positive_int("global_batch", global_batch, maximum=MAX_GLOBAL_BATCH)
    microbatch = int_tuple("microbatch", microbatch)
    for mb in microbatch:
        if global_batch % mb:
            raise ValueError(f"microbatch {mb} does not divide global_batch {global_batch}")
    hbm = resolve_hbm(hbm_gib)
    study = bool(study)
    model = cost_model(study)          # the one choice of the cost model (``_models``)
    recompute = resolve_recompute(recompute, study)
    grids = resolve_strategy_grids(study, **knobs)
    check_expert_grid(model_list, grids)
    if model.strategy_knobs:
        _calibrated.check_context_grid(model_list, grids, devices)
    moe = [m.name for m in model_list if m.is_moe]
    if moe and not model.experts:
        raise ValueError(f"study: {model.title} has no expert parallelism; {moe[0]} is "
                         f"a mixture of experts ({cost_model(not study).choose} to search it)")
    widths_all = int_tuple("tensor_parallel", tensor_parallel)
    prune = resolve_prune(prune)
    optimizer = one_of("optimizer", model.optimizer if optimizer is None else optimizer,
                       ("sgd", "adam", "muon"))
    if optimizer not in model.optimizers:
        raise ValueError(f"optimizer: {model.title} prices {' and '.join(model.optimizers)}; "
                         f"{optimizer!r} is " + ("the study's (study=True)" if optimizer == "sgd"
                                                 else "the calibrated model's (study off)"))
    objective = one_of("objective", objective, OBJECTIVES)
    if objective != "throughput" and prune:
        raise ValueError(f"objective {objective!r} needs prune off: pruning skips points by a "
                         f"bound on throughput, not on {objective}")
    if max_power_w is not None:
        max_power_w = positive_float("max_power_w", max_power_w)
    elif chip is not None and not study:
        max_power_w = step.template_cap(chip, None)
    else:
        max_power_w = math.inf if study else float(_arch.TEMPLATE_TDP_W)
    gap = _config.SCHEDULE_GAP if gap is None else nonneg_float("gap", gap)
    chunk_archs = positive_int("chunk_archs", chunk_archs or _config.SEARCH_CHUNK_ARCHS)
    if address is not None and executor is None:
        executor = "dask"
    executor = one_of("executor", "process" if executor is None else executor,
                      ("process", "serial", "dask"))
    if executor == "dask" and not address:
        raise ValueError("executor 'dask' needs address (tcp://HOST:PORT)")
    if workers is not None:
        workers = positive_int("workers", workers)
    if resume and out is None:
        raise ValueError("resume needs out (the result file to continue)")
    if out is not None:
        _files.file_format(out)
    for m in model_list:
        check_some_width(m, widths_all)
    archs = resolve_space(space)
    if max_area_mm2 is not None:
        max_area_mm2 = positive_float("max_area_mm2", max_area_mm2)
        keep = archs["area_mm2"] <= max_area_mm2
        if not keep.any():
            raise ValueError(f"max_area_mm2 {max_area_mm2:g}: no architecture of the space has "
                             f"at most that area (the smallest has "
                             f"{float(archs['area_mm2'].min()):.2f} mm2)")
        archs = np.ascontiguousarray(archs[keep])
    ids, in_default = space_ids(archs)
    widths, skipped = {}, {}
    for m in model_list:
        widths[m.name], skipped[m.name] = valid_widths(m, widths_all)

    trainers = _plan.trainer_ids(trainers) if trainers else ()
    if trainers and study:
        raise ValueError("trainers: the study's model (study=True) has no trainer plans; "
                         "drop one of them")
    if trainers and chip is not None:
        # a fixed chip's platform: the trainers that do not run on it launch nothing there
        why = [_plan.platform_refusal(t, chip.name, chip.platform) for t in trainers]
        if all(w is not None for w in why):
            raise ValueError(f"trainers: {'; '.join(why)}")
        trainers = tuple(t for t, w in zip(trainers, why) if w is None)
    settings = SearchSettings(
        models=tuple(model_list), widths=tuple(tuple(widths[m.name]) for m in model_list),
        devices=devices, global_batch=global_batch, microbatch=microbatch, hbm_gib=hbm,
        recompute=recompute, optimizer=optimizer, gap=gap, prune=prune, study=study, **grids,
        # A fixed chip trains fp8 at its own rate (one sentence when it has no fp8 tensor
        # cores); a space's rows are hypothetical chips at the template's rate.
        fp8_rate=(chip.tensor_rate(grids["precision"]) if chip is not None
                  and is_low_precision(grids["precision"]) else None), trainers=trainers,
        max_power_w=max_power_w, objective=objective)
    n_archs = archs.shape[0]
    # What must match for --resume (also recorded in the metadata).
    inputs = {
        "models": [dataclasses.asdict(m) for m in model_list], "devices": devices,
        "global_batch": global_batch, "microbatch": microbatch, "hbm_gib": hbm,
        "recompute": recompute, "tensor_parallel": widths_all, "optimizer": optimizer,
        "prune": prune, "gap": gap, "chunk_archs": chunk_archs, "n_archs": n_archs,
        "cost_model": model.name, **grids, "max_power_w": max_power_w, "objective": objective,
        "max_area_mm2": max_area_mm2,
        "space_hash": hashlib.blake2b(archs.tobytes(), digest_size=16).hexdigest(),
        "version": __version__, "baselines": bool(baselines),  # resumed chunks carry block facts
        # What an arch_id numbers: the default space's rows, or the given space's.
        "arch_ids": "default space" if in_default else "given space",
    }
    if trainers:
        inputs["trainers"] = list(trainers)  # absent otherwise: old files still resume
    if chip is not None:
        inputs["arch"] = chip.name  # a fixed system (absent otherwise: old files still resume)
    journal = (_files.Journal(out, _files.inputs_hash(inputs), resume=resume, force=force)
               if out is not None else None)
    try:
        return _run(settings, archs, ids, chunk_archs, journal, inputs, model_list, skipped,
                    executor=executor, workers=workers, address=address, prune=prune,
                    baselines=baselines, progress=progress, wall0=wall0, chip=chip,
                    run=_replay.run_record(model_list, chip, provenance))
    finally:
        if journal is not None:
            journal.close()


def _run(settings, archs, ids, chunk_archs, journal, inputs, model_list, skipped, *, executor,
         workers, address, prune, baselines, progress, wall0, chip=None,
         run=None) -> SearchResult:
    """The sweep proper once the inputs are checked and the result file (if any) is locked."""
    n_archs = archs.shape[0]
    sweep = _Sweep(settings, archs, ids, chunk_archs, journal, want_block=bool(baselines),
                   progress=sys.stderr.isatty() if progress is None else bool(progress))
    # _chunk.run_chunk is looked up here, not bound at import: tests substitute it.
    per_worker = 1 if prune else 2  # pruning: each task made with the freshest floor
    in_process = executor == "serial" or (executor == "process" and len(sweep.todo) <= 1
                                          and workers is None)
    script = (_executors.unguarded_main_script()
              if executor == "process" and not in_process else None)
    if script is not None:
        # Spawned workers would re-import the script and run this search again: run here.
        sys.stderr.write(f"phaze search: running in this process without worker processes, "
                         f"because {script} calls search() outside an `if __name__ == "
                         f"\"__main__\":` block (each worker would re-import the script and run "
                         f"it again); put the call under that guard to use all cores\n")
        in_process, executor = True, "serial"
    try:
        if in_process:
            _executors.run_serial(_chunk.run_chunk, sweep.make_task, sweep.todo, sweep.on_result)
        elif executor == "process":
            _executors.run_process_pool(_chunk.run_chunk, sweep.make_task, sweep.todo,
                                        sweep.on_result, workers=workers, per_worker=per_worker,
                                        ready=sweep.ready)
        else:
            _executors.run_dask(_chunk.run_chunk, sweep.make_task, sweep.todo, sweep.on_result,
                                address=address, per_worker=per_worker, ready=sweep.ready)
    finally:
        sweep.progress.close()
    sweep_s = time.perf_counter() - wall0

    model_names = [m.name for m in model_list]
    reduced = sweep.reduced
    if reduced is None:
        # Rows in a fixed order (chunks finish in any order): model, arch id, knobs.
        model_index = {name: i for i, name in enumerate(model_names)}
        table = concat_tables(sweep.tables)
        order = np.lexsort((recompute_rank(table["recompute"]), table["hbm_gib"],
                            table["microbatch"], table["arch_id"],
                            np.array([model_index[str(x)] for x in table["model"]],
                                     dtype=np.int64)))
        table = take(table, order)
        best = choose_best(table, model_names, settings.objective)
    else:
        # A result file: the rows are on disk only (issue 30), the summary from what the
        # sweep kept of them (_reduced.Reduced); the table reads the file back on demand.
        table = _reduced.LazyTable(journal.rows_path)
        best = choose_best(None, model_names, settings.objective, reduced=reduced)

    base = {}
    if baselines:
        base = run_baselines(settings, best, sweep.chunk_facts, archs, ids)
    wall_s = time.perf_counter() - wall0
    n_pruned = sum(int(f.get("pruned", 0)) for f in sweep.chunk_facts.values())
    metadata = {
        "phaze_version": __version__,
        # Which model priced the points: "calibrated" (phaze.step) or "study".
        "cost_model": inputs["cost_model"],
        "strategy_grids": {k: inputs[k] for k in ("recompute", *_plan.GRIDS)},
        "inputs": {k: v for k, v in inputs.items() if k not in ("models",)} | {
            "models": model_names, "seq_len": {m.name: m.seq_len for m in model_list},
            "space_rows": n_archs, "executor": executor,
            "address": address, "workers": workers},
        "wall_time_s": wall_s, "sweep_time_s": sweep_s,
        "points_total": n_archs * settings.points_per_arch, "points_evaluated": sweep.n_evaluated,
        "points_pruned": n_pruned,
        # Rate of this run: points it evaluated (resumed chunks and pruned points excluded).
        "points_per_s": (sweep.progress.evaluated / sweep_s
                         if sweep_s > 0 and sweep.progress.evaluated else None),
        # The plan searches of this run's chunks (the calibrated model; 0 for the study's):
        # plans whose bound was formed, plans priced in full, and the workers' seconds on
        # the chunks, so plans priced per core-second.
        "plans_bounded": sweep.plans_bounded, "plans_priced": sweep.plans_priced,
        "worker_busy_s": sweep.busy_s,
        "plans_per_core_s": (sweep.plans_priced / sweep.busy_s
                             if sweep.busy_s > 0 and sweep.plans_priced else None),
        "skipped_tensor_parallel": {m: {str(t): r for t, r in s.items()} for m, s in skipped.items()},
        "resumed_chunks": sweep.n_chunks - len(sweep.todo),
        # --prune best may skip points of smaller area that are on the front.
        "pareto_exact": prune != "best",
        # ... the front then keeps only what is surely on it (_report.pruned_min_area)
        "pruned_min_area_mm2": (pruned_min_area(
            table, archs, ids, settings.points_per_arch,
            counts=reduced.arch_counts() if reduced is not None else None)
            if prune == "best" else None),
    }
    if chip is not None:
        metadata["chip"] = chip.to_dict()  # the fixed system, as a chip file
    if run is not None:
        metadata["run"] = run              # what repeats the run (_replay)
    result = SearchResult(table=table, best=best, baselines=base, metadata=metadata,
                          models=model_names, reduced=reduced)
    if journal is not None:
        summary = result.summary()
        # Sorted rows (model, arch id, knobs), merged from sorted chunk spills in place: the
        # file no longer depends on which worker finished first.
        journal.finish(summary, model_names)
        if journal.format == ".json":
            _files.save_json(journal.path, summary, result.top_rows())
        elif journal.format == ".parquet":    # from the sorted rows file, batch by batch
            _files.save_parquet_rows(journal.path, journal.rows_path, summary)
    return result


#: Pruning: chunk c starts from the pruning state of chunks 0 … c − w exactly (applied in
#: chunk order), w = :func:`prune_window`, and is sent only once those are done; at most w
#: chunks run at once. So a pruned sweep evaluates the same points, and writes the same
#: bytes, whatever the worker count, the executor and the order chunks finish in.
PRUNE_WINDOW = 16


def prune_window(n_chunks) -> int:
    """The chunks a pruned sweep of ``n_chunks`` may run at once (:data:`PRUNE_WINDOW`, a
    quarter of the chunks when fewer, at least 1): a fact of the sweep, never of the
    machine, so the pruned points are too; a small sweep gives up parallel chunks to
    keep its pruning."""
    return max(1, min(PRUNE_WINDOW, int(n_chunks) // 4))


class _Sweep:
    """One sweep while its chunks run: the rows so far, per-chunk facts, the pruning state,
    the journal and the progress line.

    Chunk ``cid`` holds the space's rows ``cid·chunk_archs`` up to the next multiple (the
    last chunk may be shorter). Chunks already in the journal (``--resume``) are not run
    again: their rows and facts are taken from it.

    Pruning state: advanced in chunk order only (:func:`prune_window`): a finished
    chunk's rows wait in ``_unapplied`` until every chunk before it has been applied, and
    the task of chunk c is made from the state after chunks 0 … c − window (kept per
    chunk, so a chunk sent again after a failure gets the same one). Its points, its
    rows and the count of pruned points therefore do not depend on timing.
    """

    def __init__(self, settings, archs, ids, chunk_archs, journal, *, want_block, progress):
        self.settings, self.archs, self.chunk_archs = settings, archs, chunk_archs
        # Row number → architecture id (rows of the default space keep their number there).
        self.ids = ids
        self._id_order = np.argsort(ids, kind="stable")
        self.journal, self.want_block = journal, want_block
        self.models = list(settings.models)
        self.n_chunks = (archs.shape[0] + chunk_archs - 1) // chunk_archs
        # No result file: every chunk's rows (the table of the SearchResult). A result
        # file: none — the rows go to disk and only _reduced.Reduced's are kept (issue 30).
        self.tables = []
        self.reduced = (_reduced.Reduced([m.name for m in self.models], settings.objective,
                                        _config.SEARCH_TOP_ROWS)
                        if journal is not None else None)
        self.chunk_facts = dict(journal.chunks) if journal is not None else {}
        self.todo = [c for c in range(self.n_chunks) if c not in self.chunk_facts]
        # Pruning floors: the best throughput an evaluated point of the space reached, per model.
        self.floors = [0.0] * len(self.models)
        self.incumbents: list = []
        # Pruning "front": (area, samples/s per model) of evaluated architectures.
        self.front: list = []
        # Pruning in chunk order: chunks 0 … applied − 1 are in the state; finished chunks
        # beyond wait here (id → rows); the state each chunk's task was made from.
        self.applied = 0
        self.window = prune_window(self.n_chunks)
        self._unapplied: dict = {}
        self._task_state: dict = {}
        self.best_seen = 0.0  # the progress line's best samples/s (one model)
        self.n_evaluated = 0
        if journal is not None:
            legacy = journal.legacy_path is not None
            for cid, tab in journal.iter_previous():
                # rows of a file written before the mfu column
                fill_mfu(tab, self.models, archs, self.rows_of_ids(tab["arch_id"]))
                if legacy:  # written again in today's format (the journal's _spill)
                    facts = {k: v for k, v in journal.chunks[cid].items() if k != "digest"}
                    self._append(cid, tab, facts)
                self._keep(cid, tab)
        # this run's chunks: plans bounded and priced, and the workers' seconds on them
        self.plans_bounded = self.plans_priced = 0
        self.busy_s = 0.0
        self.progress = _Progress(
            sum(self.rows_of(c).size for c in self.todo) * settings.points_per_arch, progress)

    def rows_of_ids(self, arch_ids) -> np.ndarray:
        """Row numbers (in the searched space) of architecture ids ``arch_ids``."""
        sorted_ids = self.ids[self._id_order]
        return self._id_order[np.searchsorted(sorted_ids, np.asarray(arch_ids, dtype=np.int64))]

    def rows_of(self, cid) -> np.ndarray:
        """Row numbers of the searched space in chunk ``cid``."""
        lo = cid * self.chunk_archs
        return np.arange(lo, min(self.archs.shape[0], lo + self.chunk_archs))

    def ready(self, cid) -> bool:
        """Whether chunk ``cid`` may be sent now: without pruning always; with it once every
        chunk before ``cid − window + 1`` is done (its state is then fixed)."""
        if not self.settings.prune_mode or cid in self._task_state:
            return True
        need = cid - self.window + 1
        return all(c in self.chunk_facts for c in range(self.applied, need))

    def _advance(self, upto) -> None:
        """Apply the finished chunks ``applied`` … ``upto − 1`` to the pruning state, in order."""
        while self.applied < upto:
            tab = self._unapplied.pop(self.applied, None)
            if tab is not None:
                update_floors(tab, self.models, self.floors, self.incumbents)
                if self.settings.prune_mode == "front":
                    update_front(tab, self.models, self.front)
            self.applied += 1

    def make_task(self, cid) -> ChunkTask:
        """Chunk ``cid``'s task (called at dispatch; see :meth:`ready`): with pruning, the
        state after chunks 0 … cid − window."""
        ids = self.rows_of(cid)
        state = self._task_state.get(cid)
        if state is None:
            if self.settings.prune_mode:
                self._advance(max(0, cid - self.window + 1))
            state = (tuple(self.floors), tuple(tuple(v.tolist()) for v in self.incumbents),
                     tuple(tuple(r) for r in self.front))
            if self.settings.prune_mode:
                self._task_state[cid] = state
        return ChunkTask(settings=self.settings, chunk_id=cid,
                         archs=self.archs[ids[0]:ids[-1] + 1] if ids.size else self.archs[:0],
                         arch_ids=ids, floors=state[0], incumbents=state[1], front=state[2],
                         want_block=self.want_block)

    def _see_best(self, tab) -> None:
        """Raise the progress line's best samples/s with a chunk's rows (one model)."""
        if len(self.models) == 1 and len(tab["arch_id"]):
            feasible = np.where(tab["feasible"], tab["samples_per_s"], 0.0)
            self.best_seen = max(self.best_seen, float(feasible.max()))

    def _append(self, cid, tab, facts) -> dict:
        """Journal chunk ``cid``'s rows, in the file's order (model, arch id, knobs: the
        finish only merges them); returns them in that order."""
        mi = {m.name: i for i, m in enumerate(self.models)}
        tab = take(tab, np.lexsort((recompute_rank(tab["recompute"]), tab["hbm_gib"],
                                    tab["microbatch"], tab["arch_id"],
                                    np.array([mi[str(x)] for x in tab["model"]],
                                             dtype=np.int64))))
        self.journal.append(cid, tab, facts, in_order=True)
        return tab

    def _keep(self, cid, tab) -> None:
        """What the parent keeps of chunk ``cid``'s rows: all of them without a result
        file, else only ``Reduced``'s; with pruning, the columns the state needs until the
        chunk is applied in chunk order (make_task)."""
        if self.reduced is None:
            self.tables.append(tab)
        else:
            self.reduced.add(tab)
        self.n_evaluated += len(tab["arch_id"])
        if self.settings.prune_mode:
            self._unapplied[cid] = {k: tab[k] for k in _PRUNE_COLUMNS}
        self._see_best(tab)

    def on_result(self, res) -> None:
        """Keep a finished chunk: journal it, raise the floors, advance the progress line."""
        cid = res.chunk_id
        tab = expand(res.columns, self.archs, self.models, self.ids)
        facts = {"pruned": int(res.pruned), "evaluated": len(tab["arch_id"])}
        self.plans_bounded += int(res.plans_bounded)
        self.plans_priced += int(res.plans_priced)
        self.busy_s += float(res.busy_s)
        if res.block_fwbw_s is not None:
            facts["block"] = chunk_block_argmin(res.block_fwbw_s, self.archs,
                                                cid * self.chunk_archs)
        if self.journal is not None:
            tab = self._append(cid, tab, facts)
        self.chunk_facts[cid] = facts
        self._keep(cid, tab)
        self._task_state.pop(cid, None)
        self.progress.update(len(tab["arch_id"]), int(res.pruned), self.best_seen)


#: The columns the pruning state reads of a chunk's rows (update_floors, update_front).
_PRUNE_COLUMNS = ("model", "arch_id", "feasible", "samples_per_s", *ARCH_FIELDS)


def update_floors(tab, model_list, floors, incumbents) -> None:
    """Raise the pruning state with a chunk's rows ``tab`` (in place).

    ``floors``: per model, the best feasible samples/s reached; ``incumbents`` (several
    models): per kept architecture, its samples/s per model — the best for each model
    and the best normalised mean, enough to prove others cannot win.
    """
    if not len(tab["arch_id"]):
        return
    feasible_sps = np.where(tab["feasible"], tab["samples_per_s"], 0.0)
    names = tab["model"].astype(str)
    for mi, m in enumerate(model_list):
        sel = names == m.name
        if sel.any():
            floors[mi] = max(floors[mi], float(feasible_sps[sel].max()))
    if len(model_list) > 1:
        cols = per_arch(tab, [m.name for m in model_list])
        complete = cols["score"] >= 0
        cand = [np.array([cols[f"samples_per_s[{m.name}]"][i] for m in model_list])
                for i in np.flatnonzero(complete)]
        pool = incumbents + cand
        if pool:
            # Keep the best architecture for each model plus the best in the normalised mean.
            mat = np.array(pool)
            keep = set(np.argmax(mat, axis=0).tolist())
            norm = mat / np.maximum(mat.max(axis=0), 1e-300)
            keep.add(int(np.argmax(norm.mean(axis=1))))
            incumbents[:] = [pool[i] for i in sorted(keep)]


def update_front(tab, model_list, front, cap=256) -> None:
    """Add a chunk's architectures to the pruning front (in place): rows (area mm²,
    samples/s per model) of evaluated architectures, none beaten by another of no more
    area in every model. Any subset is a valid set of witnesses, so beyond ``cap`` rows
    those with the best normalised mean are kept (less pruning, never a wrong front)."""
    if not len(tab["arch_id"]):
        return
    names = [m.name for m in model_list]
    cols = per_arch(tab, names)
    new = np.column_stack([cols["area_mm2"]] + [cols[f"samples_per_s[{n}]"] for n in names])
    new = new[(new[:, 1:] > 0).any(axis=1)]
    pool = np.unique(np.vstack([np.asarray(front, dtype=np.float64).reshape(-1, 1 + len(names)),
                                new]), axis=0)
    if not len(pool):
        return
    area, sps = pool[:, 0], pool[:, 1:]
    # Row j beats row i when it has no more area and at least i's throughput in every
    # model (rows are distinct, so two rows never beat each other).
    beaten = ((area[:, None] <= area[None, :])
              & np.all(sps[:, None, :] >= sps[None, :, :], axis=2))
    np.fill_diagonal(beaten, False)
    pool = pool[~beaten.any(axis=0)]
    if len(pool) > cap:
        norm = pool[:, 1:] / np.maximum(pool[:, 1:].max(axis=0), 1e-300)
        pool = pool[np.argsort(-norm.mean(axis=1), kind="stable")[:cap]]
    front[:] = pool.tolist()


_plan.keyword_signature(search, _plan.GRIDS, {name: None for name in _plan.GRIDS})
