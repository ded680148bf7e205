"""One declaration of a training plan: the knob table, the :class:`Plan` record and the
launchability rules (issue 23 item 1; docs/design.md §2.9, §5).

A plan is what a trainer is told: the placement sizes (tensor, pipeline, data, expert and
context parallel widths, microbatch, global batch) and the strategy knobs (recomputation,
interleaving, sequence parallelism, flash attention, ZeRO, overlapped gradient reduction,
MoE capacity factor, datatype). :data:`KNOBS` declares each of them once — its Python
name and type, domain and validation rule, default (today's behaviour), the command-line
flags of ``phaze evaluate`` (one value) and ``phaze search`` (a comma list), the result
column and its summary header, the legend text, the value the original study's model
has, and the argument names of the trainers it maps to (Megatron-LM / Megatron-Core,
Megatron-DeepSpeed, torchtitan). Everything else reads this table:

- :class:`Plan` (a frozen dataclass, validated) and :data:`PLAN_RECORD_DTYPE` (its numpy
  record) are generated from it;
- the CLI (``phaze.cli``) adds its options with :func:`add_evaluate_options` /
  :func:`add_search_options` and parses the lists with :func:`search_values`;
- ``phaze.search`` takes the strategy grids (:func:`grid`), writes the result columns
  (:data:`COLUMNS`), prints the summary columns (:func:`summary_header`,
  :func:`summary_cells`) and the cost-model line (:func:`grid_words`);
- ``phaze.step.training_step`` validates its keywords with :func:`check_keywords` and
  records :meth:`Plan.as_dict`; :func:`trainers` says who can launch it;
- ``phaze.launch`` refuses what a trainer cannot run with :func:`refusal`.

The launchability rules (:data:`RULES`) are data too: each names a trainer, the knobs it
reads, when it refuses and the sentence it says. ``kind="trainer"`` rules are what the
trainer itself cannot do (they decide :func:`trainers`); ``kind="emit"`` rules are what
phaze's argument writer (``phaze.launch``) does not write for that trainer.

How to add a knob: one :class:`Knob` row in ``phaze/plan/_knobs.py`` (its rule, if a
trainer refuses some values, and its trainer arguments); then the cost model that
prices it (``phaze.step``, ``phaze.graph``) and, for a searched knob, the search kernel's
loop (``phaze.step._plans``, ``phaze.search``'s chunk
runner). The CLI options, keywords, result column, legend, summaries, ``--emit`` and
trace read it from here. Example (``grad_reduce_dtype``, a one-value knob): the row, a
Megatron-LM rule and the two argument writers in ``_knobs.py``; a ``PLAN`` field read by
the kernels (``step/_kernels.py``), set by ``plan_records`` and taken by ``best_plans``
(``step/_plans.py``); ``training_step`` passing it on (``step/_model.py``); the calibrated
search handing its setting to ``best_plans`` (``search/_calibrated.py``).

The package: ``_knobs`` holds the table and everything that names a knob (the record,
the rules, the argument writers); ``_use`` the generic readers (keyword checks and the
study's values, grids, command line, legend and summaries, keyword signatures); ``torchtitan`` (``_torchtitan``) torchtitan's
model flavours and job-config writers.
"""
from ._knobs import (ARGUMENTS, COLUMNS, DS_CONFIG, GRIDS, KNOB, KNOBS, MODEL_ARGUMENTS, NAMES,
                     PLAN_RECORD_DTYPE, RULES, STRATEGY, STRATEGY_COLUMNS, TRAINERS, Knob, Plan,
                     Rule, Trainer, check, check_expert_grid, devices_of, ds_config,
                     launchable, model_expert_grid, refusal, torchtitan_notes,
                     trainer_arguments, trainers)
from ._launchers import (launch_refusal, launchers, model_values, platform_refusal, search_grids,
                         sharding_refusal, sharding_rules, trainer_ids, launched_mask,
                         trainer_values)
from ._knobs import environment, layer_graph_keywords, pipeline_chunks
from ._model_flags import (MODEL_FLAGS, ROTARY_BASE, ModelFlag, hybrid_pattern, model_arguments,
                           model_refusal)
from . import _torchtitan as torchtitan
from ._use import (RECOMPUTE_WORDS, SWITCH_WORDS, add_evaluate_options, add_search_options,
                   check_keywords, differs_from_study, grid, grid_words, int_tuple,
                   keyword_signature, legend_lines, search_values, study_value,
                   summary_cells, summary_header, summary_phrases, summary_row, words)

__all__ = ["Knob", "KNOBS", "KNOB", "NAMES", "STRATEGY", "GRIDS", "COLUMNS",
           "STRATEGY_COLUMNS", "Plan", "PLAN_RECORD_DTYPE", "Trainer", "TRAINERS", "Rule",
           "RULES", "trainers", "launchable", "refusal", "launchers", "launch_refusal",
           "platform_refusal",
           "search_grids", "model_values", "sharding_rules", "sharding_refusal",
           "trainer_ids", "launched_mask", "trainer_values", "environment", "layer_graph_keywords",
           "pipeline_chunks", "MODEL_FLAGS", "ModelFlag",
           "ROTARY_BASE", "model_arguments", "model_refusal", "hybrid_pattern", "ARGUMENTS",
           "DS_CONFIG",
           "MODEL_ARGUMENTS", "trainer_arguments", "ds_config", "check", "check_keywords",
           "grid", "study_value", "differs_from_study", "devices_of", "model_expert_grid",
           "check_expert_grid", "add_evaluate_options", "add_search_options", "search_values",
           "int_tuple", "words", "legend_lines", "summary_header", "summary_row",
           "summary_cells", "summary_phrases", "grid_words", "keyword_signature",
           "SWITCH_WORDS", "RECOMPUTE_WORDS", "torchtitan", "torchtitan_notes"]
