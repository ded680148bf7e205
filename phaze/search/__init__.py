"""The joint sweep: accelerator architecture × training knobs × device placement
(docs/design.md §2.7–2.8).

This face only re-exports; the work lives in modules named for their job:

* ``_driver``: :func:`search` — checks the input, cuts the space into chunks,
  runs them, keeps the rows, picks the best point, runs the baselines;
* ``_settings``: what travels to a worker (``SearchSettings``, ``ChunkTask``,
  ``ChunkResult``);
* ``_models``: the cost models, each described once (``COST_MODELS``: what it prices and
  refuses), chosen once at the entrance (``cost_model``);
* ``_chunk``: the one chunk runner (pruning, batches, floors) with the cost model's
  pricing plugged in from ``PRICING``; ``_pricing``: that interface (``Pricing``) and the
  chunk's columns;
* ``_study``: the study's pricing (latencies → schedules → placement, its bounds);
* ``_calibrated``: the calibrated step model's pricing (the default:
  ``phaze.step.best_plans`` with the strategy grids, ``step_lower_bounds`` for pruning),
  and the calibrated baselines' pieces;
* ``_point``: :func:`evaluate_point`, one architecture with a given strategy;
* ``_baselines``: the three baselines (``BASELINE_NAMES``, ``FIXED_STRATEGIES``);
* ``_report``: :class:`SearchResult`, ranking, Pareto front, summary text,
  :func:`load_result`;
* ``_table``: the result table's columns and row operations;
* ``_files``: result files and the resumable journal;
* ``_executors``: serial, local process pool, Dask (``ChunkFailed``);
* ``_inputs``: checking the arguments.

Also re-exported for the trace and the command line: the summary's pieces
(:func:`cost_model_line`, :func:`knob_text`), a model's layer graphs and chain facts
(:func:`model_graph`, :func:`chain_static`) and the input resolvers (:func:`arch_row`,
:func:`resolve_models`).
"""
from ._baselines import BASELINE_NAMES, BASELINE_TITLES, FIXED_STRATEGIES
from ._chunk import chain_static, model_graph
from ._driver import search
from ._executors import ChunkFailed
from ._inputs import arch_row, resolve_models
from ._point import evaluate_point
from ._replay import read_meta, replay
from ._report import SearchResult, cost_model_line, format_summary, knob_text, load_result
from ._table import TABLE_COLUMNS, json_safe

__all__ = ["search", "evaluate_point", "SearchResult", "load_result", "format_summary",
           "read_meta", "replay",
           "BASELINE_NAMES", "BASELINE_TITLES", "FIXED_STRATEGIES", "ChunkFailed", "TABLE_COLUMNS",
           "json_safe", "cost_model_line", "knob_text", "model_graph", "chain_static",
           "arch_row", "resolve_models"]
