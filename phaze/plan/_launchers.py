"""Who launches a plan, from the launchability rules of ``phaze.plan._knobs`` and the
model arguments of ``phaze.plan._model_flags``: the one source of truth that
``phaze.launch`` (its refusals), ``phaze evaluate`` (its "launchable by" line) and
``phaze search --emit`` (its narrowed grids) read (issue 29 items 4-6)."""
from __future__ import annotations

from ._knobs import (_JUDGED, ENUMERATED as _ENUMERATED, KNOB, KNOBS, RULES, SHARDING, TRAINERS,
                     _values, refusal, search_contexts as _contexts)

_ZERO, _RANKS = SHARDING


def model_values(spec) -> dict:
    """What the launchability rules read of a model (beside the plan's knobs): its
    layers, routed experts (``moe``: it has some), heads, key/value heads, whether a
    tensor-parallel width divides them (``valid_tp``), its untied embeddings, name and
    torchtitan flavor (None: none)."""
    from . import _torchtitan
    n_experts = getattr(spec, "n_experts", 0) or 0
    return dict(n_layers=spec.n_layers, n_experts=n_experts, moe=bool(n_experts),
                heads=spec.heads, kv_heads=spec.kv_heads,
                valid_tp=spec.valid_tensor_parallel,
                tied_embeddings=bool(getattr(spec, "tied_embeddings", True)),
                model=spec.name, torchtitan_flavor=_torchtitan.flavor(spec))


#: The emitter of each trainer (``phaze.launch``'s name → trainer id) and back.
_EMITTER = {"megatron": "megatron-lm", "deepspeed": "deepspeed", "torchtitan": "torchtitan"}


def launch_refusal(trainer: str, values: dict, spec=None):
    """Why ``trainer`` (an id of :data:`TRAINERS` or its ``emit`` name) cannot be handed
    the plan ``values`` (its knobs; absent ones at their defaults) of the model ``spec``
    (None: the model-level rules are skipped), in one sentence, or None: the one source
    of truth of "who launches this plan" (the shared rules, then the trainer's layout,
    trainer and emit rules, then the model arguments phaze writes for it). ``phaze.launch``
    refuses by it, ``phaze evaluate`` prints its "launchable by" line from it
    (:func:`launchers`) and ``phaze search --emit`` narrows its grids by it
    (:func:`search_grids`)."""
    trainer = _EMITTER.get(trainer, trainer)
    v = dict(values)
    if spec is not None:
        v = {**model_values(spec), **v}
        if trainer in ("megatron-lm", "deepspeed"):
            from ._model_flags import model_refusal
            why = model_refusal("megatron" if trainer == "megatron-lm" else "deepspeed", spec)
            if why is not None:
                return why
    why = refusal("any", v, ("shared",))
    if why is None:
        kinds = ("layout", "trainer", "emit") if spec is not None else ("trainer", "emit")
        why = refusal(trainer, v, kinds)
    return why


def trainer_values(trainer: str, given: dict) -> dict:
    """The one-value knobs (``Knob.search`` "one") that ``given`` (knob name → value) leaves
    out and whose default ``trainer`` (an id or its ``emit`` name) does not run, each at the
    first of its values the trainer runs: what a plan handed to that trainer holds there
    (torchtitan: ``master_weights`` "params", FSDP2's fp32 parameters). {name: value}."""
    tid = _EMITTER.get(trainer, trainer)

    def refused(name, value):   # by the trainer's rules that read this knob
        v = _values({**{n: x for n, x in given.items() if n in KNOB}, name: value})
        return any(r.trainer == tid and r.kind in ("trainer", "emit") and name in r.knobs
                   and r.refuses(v) for r in RULES)

    out = {}
    for k in KNOBS:
        if k.search != "one" or k.choices is None or k.name in given:
            continue
        if refused(k.name, k.default):
            runs = [c for c in k.choices if not refused(k.name, c)]
            if runs:
                out[k.name] = runs[0]
    return out


def launchers(values: dict, spec=None) -> tuple:
    """The trainers (ids, in :data:`TRAINERS` order) that launch the plan ``values`` of the
    model ``spec`` with the arguments phaze writes: those :func:`launch_refusal` does not
    refuse."""
    return tuple(t for t in _JUDGED if launch_refusal(t, values, spec) is None)


def platform_refusal(trainer: str, chip: str, platform):
    """Why ``trainer`` (an id of :data:`TRAINERS` or its ``emit`` name) does not run on the
    chip named ``chip`` whose file states ``platform`` (``phaze.arch.PLATFORMS``), in one
    sentence, or None: it does, or the chip states no platform (the template's
    hypothetical chips, the study's tpuv4)."""
    tid = _EMITTER.get(trainer, trainer)
    t = next(x for x in TRAINERS if x.id == tid)
    if platform is None or platform in t.platforms:
        return None
    return (f"{t.title} does not run on {chip}, a {platform} chip ({t.title} runs on "
            f"{', '.join(t.platforms)})")


def trainer_ids(names) -> tuple:
    """The trainer ids (in :data:`TRAINERS` order) of ``names`` (ids or ``emit`` names,
    e.g. ``phaze search --emit``'s choice); an unknown name is ``ValueError``."""
    ids = set()
    for name in names:
        tid = _EMITTER.get(name, name)
        if tid not in _JUDGED:
            raise ValueError(f"trainers: {name!r} is not a trainer; allowed: "
                             f"{', '.join(_JUDGED)}")
        ids.add(tid)
    return tuple(t for t in _JUDGED if t in ids)


def sharding_rules(trainers) -> tuple:
    """The "trainer" and "emit" rules of the trainer ids ``trainers`` that read the ZeRO
    stage, and the enumerated knobs (of :data:`_ENUMERATED`) they read: what decides
    which (ZeRO stage, p, d, cp, ep, t, v) combinations of the search's plan set those
    trainers launch (each knob alone is narrowed by :func:`search_grids`)."""
    rules = tuple(r for r in RULES if r.trainer in trainers and r.kind in ("trainer", "emit")
                  and _ZERO in r.knobs)
    read = tuple(k for k in _ENUMERATED if any(k in r.knobs for r in rules))
    return rules, read


def sharding_refusal(trainer, rules, values: dict):
    """The sentence of the first of ``rules`` (:func:`sharding_rules`) of ``trainer`` that
    refuses the plan ``values`` (knobs, absent at their defaults, plus
    :func:`model_values`), or None."""
    v = _values(values)
    for rule in rules:
        if rule.trainer == trainer and rule.refuses(v):
            return rule.why(v)
    return None


def launched_mask(trainers, spec, columns: dict, values: dict):
    """Which plans of the search's plan set (``columns``: each enumerated knob of
    :data:`_ENUMERATED` → an array, one entry per plan) one of the trainer ids
    ``trainers`` launches, by :func:`sharding_rules` (``values``: the plan set's one-value
    knobs; ``spec``: the model): a boolean array. ZeRO over one (context × data) rank is
    no sharding (every stage is one plan there): those plans are kept."""
    import numpy as np
    n = len(columns[_ZERO])
    rules, read = sharding_rules(trainers)
    if not rules or not n:
        return np.ones(n, dtype=bool)
    sharded = np.asarray(columns[_RANKS[0]]) * np.asarray(columns[_RANKS[1]]) > 1
    key = np.stack([np.asarray(columns[k], dtype=np.int64) for k in read]
                   + [sharded.astype(np.int64)])
    uniq, inverse = np.unique(key, axis=1, return_inverse=True)
    base = {**model_values(spec), **values}
    ok = np.ones(uniq.shape[1], dtype=bool)
    for j in range(uniq.shape[1]):
        if uniq[-1, j]:
            at = dict(base, **{k: (bool if KNOB[k].type is bool else int)(uniq[i, j])
                               for i, k in enumerate(read)})
            ok[j] = any(sharding_refusal(t, rules, at) is None for t in trainers)
    return ok[inverse.reshape(-1)]


def _refused(tid, bases, values):
    """The first sentence by which trainer ``tid`` refuses ``values`` (its trainer and
    emit rules) for one of the models of ``bases`` (their :func:`model_values`), or None."""
    for base in bases:
        why = refusal(tid, {**base, **values}, ("trainer", "emit"))
        if why is not None:
            return why
    return None


def search_grids(trainer: str, grids: dict, models=()) -> dict:
    """The search's strategy grids (``grids``: knob name → a tuple, or None for every
    value; the one-value knobs their value) narrowed to the plans ``trainer`` launches
    (``phaze search --emit``), by :func:`launch_refusal`: a grid value the trainer
    refuses with every other knob at its default (or, for the ZeRO stage, beside a
    pipeline: the search's plan set keeps ZeRO 3 with pipeline parallelism where
    torchtitan's FSDP2 takes it, so a trainer that refuses it there is searched without
    ZeRO 3) is dropped; an open width a trainer takes only at 1 becomes (1,). A one-value
    knob left unset whose default the trainer does not run takes the first value it runs
    (torchtitan: ``master_weights`` "params"). A one-value knob, or a model, the trainer
    refuses is ``ValueError`` in one sentence."""
    tid = _EMITTER.get(trainer, trainer)
    title = next(t.title for t in TRAINERS if t.id == tid)
    out = dict(grids)
    # the one-value knobs left unset whose default the trainer does not run: its own values,
    # which every check below holds (torchtitan: master_weights params)
    own = trainer_values(tid, {n: v for n, v in grids.items()
                               if n in KNOB and KNOB[n].search == "one" and v is not None})
    out.update(own)
    bases = [{**model_values(spec), **own} for spec in models] or [
        dict(n_layers=1, n_experts=0, moe=False, **own)]
    for spec in models:
        # the model itself (its arguments, its flavor, its experts), at the default plan
        why = None
        if tid in ("megatron-lm", "deepspeed"):
            from ._model_flags import model_refusal
            why = model_refusal("megatron" if tid == "megatron-lm" else "deepspeed", spec)
        why = why or refusal(tid, {**model_values(spec), **own}, ("emit",))
        if why is not None:
            raise ValueError(f"--emit {trainer}: {title} cannot launch {spec.name}: {why}")
    for name, value in grids.items():
        k = KNOB.get(name)
        if k is None:
            continue
        if k.search == "one":
            if name in own:
                continue
            why = _refused(tid, bases, {name: value} if value is not None else {})
            if why is not None:
                raise ValueError(f"--emit {trainer}: {k.flag} {value}: {why}")
            continue
        if k.type is bool:
            values = (False, True) if value is None else tuple(value)
        elif k.choices is not None:
            values = tuple(k.choices) if value is None else tuple(value)
        else:
            values = (1, 2) if value is None else tuple(value)
        keep = []
        for x in values:
            # kept where the plan set holds a plan of it that the trainer launches (the plan
            # set, given the trainer, drops the others: phaze.step.best_plans' launchable)
            if any(_refused(tid, bases, {name: x, **at}) is None for at in _contexts(name, x)):
                keep.append(x)
        if not keep:
            why = _refused(tid, bases, {name: values[0]})
            raise ValueError(f"--emit {trainer}: {title} launches none of the {k.flag} values "
                             f"searched: {why}")
        if value is None and k.type is int and k.choices is None:
            out[name] = None if len(keep) == len(values) else (1,)
        elif value is None and len(keep) == len(values):
            out[name] = None
        else:
            out[name] = tuple(keep)
    return out
