"""The records of a training plan's knob table: :class:`Knob`, :class:`Trainer` and
:class:`Rule` (``phaze.plan._knobs`` holds the table, the trainers and the rules)."""

from __future__ import annotations

import dataclasses

import numpy as np

from .._validate import nonneg_int, positive_float, positive_int, show


@dataclasses.dataclass(frozen=True)
class Knob:
    """One knob of a training plan (module docstring). Field by field:

    - ``name``: the Python keyword, :class:`Plan` field and (when ``column``) result column;
      ``type``: bool, int, str or float; ``default``: today's behaviour; ``choices``: the
      allowed values (None: any value ≥ ``minimum`` for an int, any positive number for a
      float); ``optional``: None is allowed too (meaning "not set");
      ``rule``: what is allowed, as the end of the one-sentence error ("must be ...").
    - ``flags``: the command-line flags (the first is the canonical one, the others
      aliases); ``metavar``/``help``: ``phaze evaluate``'s (one value; a bool is a bare
      switch); ``search``: how ``phaze search`` takes it — "grid" (a comma list, absent =
      every value), "one" (one value) or None (not a search option); ``search_metavar`` /
      ``search_help`` / ``search_default`` (the flag's default text, None: absent);
      ``grid_none``: what an absent grid means, in words ("both", "every valid v").
    - ``column``: a column of the search's result table; ``column_rank``: its place among
      the plan's columns (today's file order); ``short``/``width``: the summary's header
      and its width; ``phrase``: how a baseline line says it (a format with one ``{}``;
      "": the header word, a space and the value); ``legend``: the legend's text for it
      (``phaze search --help``).
    - ``grid_rank``: its place among the search's strategy grids (metadata, the summary's
      cost-model line); ``title``: its name in words.
    - ``study``: the value the original study's model has (the only one it prices);
      ``calibrated_only`` says the study's model refuses any other value; ``study_lacks``:
      what the study's model has not, in words, for a one-value knob (e.g. "the datatype choice").
    - ``megatron``, ``deepspeed``, ``torchtitan``: the trainer arguments it maps to
      (Megatron-LM / Megatron-Core ``megatron/training/arguments.py``; Megatron-DeepSpeed
      ``megatron/arguments.py`` and the ds_config; torchtitan's job config, written
      ``--section.key``); "" when the trainer has none.
    - ``devices_factor``: the plan's GPUs are the product of these sizes (t·cp·p·d);
      ``noop_note``: what ``evaluate`` says when the value asked for is a no-op (the plan
      records ``NAME_effective`` False).
    - ``trace_values``: the values ``phaze trace`` draws (None: every value);
      ``trace_note``: its sentence for another value (""): the option is hidden in
      ``phaze trace`` and refused by name). ``pipeline_only``: the knob shapes only a
      pipeline of two or more stages (at p = 1 every value prices the same step, tested),
      so ``phaze trace`` draws a plan of one stage at any value.
    - ``file_key``: the key of a row of the validation table (``phaze.validate``; "": not
      in its schema), ``file_rank`` its place in a report row's ``config``,
      ``file_optional``: the row may leave it out (the knob's default).
    - ``required``: ``phaze evaluate`` must be given it; ``evaluate_default``: its
      default there (None: absent, so that the study's model can refuse it by name).
    - ``normalize``: for a str knob without ``choices`` whose value is a set (e.g.
      ``recompute_modules``), ``normalize(value, field)`` gives the canonical string or
      raises the one-sentence ``ValueError``.
    """

    name: str
    type: type
    default: object
    rule: str
    choices: tuple = None
    minimum: int = None
    optional: bool = False
    flags: tuple = ()
    metavar: str = None
    help: str = ""
    const: object = None
    required: bool = False
    evaluate_default: object = None
    search: str = None
    search_metavar: str = None
    search_help: str = ""
    search_default: str = None
    grid_none: str = ""
    column: bool = False
    column_rank: int = None
    short: str = ""
    width: int = 0
    phrase: str = ""
    legend: str = ""
    grid_rank: int = None
    title: str = ""
    study: object = None
    calibrated_only: bool = False
    study_lacks: str = ""
    megatron: str = ""
    deepspeed: str = ""
    torchtitan: str = ""
    devices_factor: bool = False
    noop_note: str = ""
    trace_values: tuple = None
    trace_note: str = ""
    pipeline_only: bool = False
    file_key: str = ""
    file_rank: int = None
    file_optional: bool = False
    normalize: object = None

    @property
    def dest(self) -> str:
        """The argparse destination (= the Python keyword)."""
        return self.name

    @property
    def flag(self) -> str:
        """The canonical command-line flag."""
        return self.flags[0] if self.flags else ""

    def check(self, value, field: str = None):
        """``value`` as this knob's canonical Python value; ``ValueError`` in one sentence
        naming the field (``field``, default the knob's name) and what is allowed."""
        field = field or self.name
        if value is None and self.optional:
            return None
        if self.normalize is not None:   # a set-valued str knob: its canonical spelling
            return self.normalize(value, field)
        if self.type is bool:
            if isinstance(value, (bool, np.bool_)) or (
                    isinstance(value, (int, np.integer)) and value in (0, 1)):
                return bool(value)
            raise ValueError(f"{field} must be {self.rule}, got {show(value)}")
        if self.type is int:
            if self.choices is not None:
                if isinstance(value, (bool, np.bool_)) or not isinstance(
                        value, (int, np.integer)) or int(value) not in self.choices:
                    raise ValueError(f"{field} must be {self.rule}, got {show(value)}")
                return int(value)
            return (nonneg_int(field, value) if self.minimum == 0
                    else positive_int(field, value))
        if self.type is float:
            return positive_float(field, value)
        if isinstance(value, str) and value in self.choices:
            return value
        raise ValueError(f"{field} must be {self.rule}, got {show(value)}")


@dataclasses.dataclass(frozen=True)
class Trainer:
    """A trainer phaze knows: ``id`` (as ``StepResult.plan["trainers"]`` lists it),
    ``title`` (in sentences), ``emit`` (``phaze.launch``'s name, "" when it writes none),
    ``knob`` (the :class:`Knob` field holding its argument names) and ``platforms`` (the
    chip platforms it runs on, ``phaze.arch.PLATFORMS``: a chip whose file states another
    platform cannot launch it)."""

    id: str
    title: str
    emit: str
    knob: str
    platforms: tuple = ()


@dataclasses.dataclass(frozen=True)
class Rule:
    """One launchability rule: ``trainer`` (a :class:`Trainer` id, or "any") refuses a plan
    when ``refuses(values)`` holds, saying ``why(values)``. ``values``: the plan's knobs by
    name, plus the model's ``n_layers``, ``n_experts`` and ``moe`` (it has routed
    experts). ``kind``: "trainer" (the trainer cannot run it: these decide
    :func:`trainers`), "layout" (the trainer's arguments cannot express the plan's shape),
    "shared" (no trainer's can, ``trainer`` "any") or "emit" (phaze's argument writer does
    not write it for that trainer). ``knobs``: the knobs it reads."""

    trainer: str
    kind: str
    knobs: tuple
    refuses: object
    why: object
