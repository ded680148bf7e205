"""Fuzz of every public entry point (issue 17, item 10).

Each entry point gets arguments that mix valid values with junk (None, booleans,
huge and negative integers, NaN and infinities, text, nested containers) and must
either work or raise ``ValueError``/``KeyError``/``TypeError``/``OSError`` (or a
subclass) carrying one clear sentence: a message on one line that is not a bare
key or a Python-internal text. Any other exception (OverflowError, MemoryError,
RecursionError, ZeroDivisionError, IndexError, SystemError, ...) fails the test.
Example counts are bounded (the "ci" profile of conftest.py, less for search).
"""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phaze import arch, cost, graph, models, placement, schedule, search

ALLOWED = (ValueError, KeyError, TypeError, OSError)

# Texts Python itself puts in exceptions: a message holding one is not phaze's sentence.
_INTERNAL = ("object is not", "unsupported operand", "not subscriptable", "takes ", "positional "
             "argument", "unhashable", "has no attribute", "invalid literal for", "could not convert",
             "Exceeds the limit", "truth value of an array")


def _check(fn, *args, **kwargs):
    """Call ``fn``; an exception must be an allowed type with one clear sentence."""
    try:
        return fn(*args, **kwargs)
    except ALLOWED as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        msg = str(msg)
        assert msg and "\n" not in msg.strip(), f"{type(exc).__name__} without one sentence: {msg!r}"
        assert len(msg.split()) >= 3, f"{type(exc).__name__}: {msg!r} is not a sentence"
        assert not any(t in msg for t in _INTERNAL), f"{type(exc).__name__}: {msg!r}"
        return None


junk = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 3), st.sampled_from([0, -1, 2 ** 31, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 10 ** 40]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, 5e-324, -0.0]),
    st.text(max_size=6), st.lists(st.integers(-2, 2), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def maybe(valid):
    """Mostly the valid value, sometimes junk."""
    return st.one_of(valid, valid, junk)


TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
#: Examples per entry point; PHAZE_FUZZ_EXAMPLES raises it for a longer local hunt.
N_EXAMPLES = int(os.environ.get("PHAZE_FUZZ_EXAMPLES", "40"))
FAST = settings(max_examples=N_EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FAST
@given(model=maybe(st.sampled_from(["bert-large", TINY])), arch_=maybe(st.just("tpuv4")),
       t=maybe(st.sampled_from([1, 2])), p=maybe(st.sampled_from([1, 2])),
       d=maybe(st.sampled_from([1, 2])), mb=maybe(st.sampled_from([1, 2])),
       recompute=maybe(st.booleans()), devices=maybe(st.none()),
       global_batch=maybe(st.just(8)), hbm=maybe(st.none()), optimizer=maybe(st.just("adam")))
def test_fuzz_evaluate_point(model, arch_, t, p, d, mb, recompute, devices, global_batch, hbm,
                             optimizer):
    _check(search.evaluate_point, model, arch_, t, p, d, mb, recompute, devices=devices,
           global_batch=global_batch, hbm_gib=hbm, optimizer=optimizer)


_ROWS = arch.ArchSpace.default().configs[::10000]


@settings(FAST, max_examples=max(1, N_EXAMPLES // 3))
@given(devices=maybe(st.just(4)), global_batch=maybe(st.just(8)),
       microbatch=maybe(st.just((1, 2))), hbm=maybe(st.just((0.002,))),
       recompute=maybe(st.just((False,))), tp=maybe(st.just((1, 2))),
       optimizer=maybe(st.just("sgd")), chunk=maybe(st.just(2)), gap=maybe(st.none()))
def test_fuzz_search(devices, global_batch, microbatch, hbm, recompute, tp, optimizer, chunk, gap):
    _check(search.search, TINY, devices=devices, global_batch=global_batch, microbatch=microbatch,
           hbm_gib=hbm, recompute=recompute, tensor_parallel=tp, space=_ROWS,
           optimizer=optimizer, executor="serial", progress=False, baselines=False,
           chunk_archs=chunk, gap=gap)


# --- placement -------------------------------------------------------------
@pytest.fixture(scope="module")
def phaze_doc(golden):
    return json.loads((golden / "placement" / "inst_000.json").read_text())


_TOP_FIELDS = ("maxMemoryPerDevice", "maxDevices", "bandwidth", "mbsInBatch",
               "activationRecomputation", "optimizerAlgorithm", "nodes", "edges")


@FAST
@given(field=st.sampled_from(_TOP_FIELDS), value=junk, layer_field=st.text(max_size=12),
       layer_value=junk)
def test_fuzz_placement_json(phaze_doc, tmp_path_factory, field, value, layer_field,
                             layer_value):
    doc = json.loads(json.dumps(phaze_doc))
    doc[field] = value
    _check(placement.problem_from_phaze_dict, doc)
    doc = json.loads(json.dumps(phaze_doc))
    width = next(iter(doc["nodes"]))
    layer = doc["nodes"][width][0]
    key = layer_field if layer_field in layer or not layer else sorted(layer)[len(layer_field)
                                                                            % len(layer)]
    layer[key] = layer_value
    problem = _check(placement.problem_from_phaze_dict, doc)
    if problem is not None:
        _check(placement.solve, problem)
    path = tmp_path_factory.mktemp("pj") / "p.json"
    try:
        path.write_text(json.dumps(doc))
    except ValueError:  # NaN is valid for Python's json only
        return
    _check(placement.load_phaze_json, path)


@FAST
@given(devices=maybe(st.just(8)), memory=maybe(st.just(1e12)), bandwidth=maybe(st.just(1e11)),
       microbatches=maybe(st.just(4)), scale=maybe(st.just(1e-3)), recompute=maybe(st.booleans()),
       optimizer=maybe(st.just("sgd")))
def test_fuzz_placement_solve(devices, memory, bandwidth, microbatches, scale, recompute,
                              optimizer):
    try:
        lat = np.full((1, 4), 1.0) * scale
    except (TypeError, ValueError):
        lat = scale  # junk in place of the latency array

    def make():
        return placement.PlacementProblem(
            widths=[1], forward_s=lat, backward_s=lat, param_bytes=np.full((1, 4), 1e6),
            activation_bytes=np.full((1, 4), 1e5), tensor_parallel=np.ones((1, 4), bool),
            edge_bytes=np.full((1, 3), 1e4), devices=devices, memory_bytes=memory,
            bandwidth=bandwidth, microbatches=microbatches, recompute=recompute,
            optimizer=optimizer)

    problem = _check(make)
    if problem is not None:
        _check(placement.solve, problem)


# --- cost and schedule ------------------------------------------------------
_GRAPH = graph.build_layers(TINY, 1, 1).layers[1].forward
_ARCHS = arch.ArchSpace.default().configs[::20000]


@FAST
@given(field=st.sampled_from([n for n in _ARCHS.dtype.names]), value=junk)
def test_fuzz_op_latencies(field, value):
    archs = _ARCHS.copy()
    try:
        archs[field] = value
    except (TypeError, ValueError, OverflowError):
        return  # not storable in the structured row: numpy refuses before phaze sees it
    _check(cost.op_latencies, _GRAPH, archs)
    _check(cost.op_latencies, "not a graph", _ARCHS)


_SINGLE, _INTRA = cost.op_latencies(_GRAPH, _ARCHS[:1])


@FAST
@given(num_tc=maybe(st.integers(1, 4)), num_vc=maybe(st.integers(1, 4)),
       gap=maybe(st.just(0.01)), method=maybe(st.sampled_from(["auto", "list"])),
       scale=maybe(st.just(1.0)), time_limit=maybe(st.just(5.0)))
def test_fuzz_schedule_layer(num_tc, num_vc, gap, method, scale, time_limit):
    try:
        single = _SINGLE[:, 0] * scale
        intra = _INTRA[:, 0] * scale
    except (TypeError, ValueError):
        single, intra = scale, scale  # junk in place of the latency columns
    _check(schedule.schedule_layer, _GRAPH, single, intra, num_tc, num_vc, gap=gap, method=method,
           time_limit=time_limit)


# --- Hugging Face configs and result files ---------------------------------
_HF_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings",
            "hidden_act", "tie_word_embeddings", "head_dim", "n_embd", "n_layer", "n_head",
            "activation_function", "num_local_experts", "sliding_window", "rms_norm_eps")


@FAST
@given(base=st.sampled_from(["llama", "gpt2", "opt", "bert", "mistral", None]),
       changes=st.dictionaries(st.sampled_from(_HF_KEYS), junk, max_size=3),
       seq_len=maybe(st.none()))
def test_fuzz_from_hf_config(base, changes, seq_len):
    cfg = {"model_type": base} if base else {"rms_norm_eps": 1e-5}
    cfg.update(changes)
    _check(models.from_hf_config, cfg, seq_len=seq_len)


@pytest.fixture(scope="module")
def result_bytes(tmp_path_factory):
    r = search.search(TINY, study=True, space=_ROWS, executor="serial", progress=False, baselines=False,
                      devices=4, global_batch=8, microbatch=(1,), hbm_gib=(0.002,),
                      recompute=(False,), tensor_parallel=(1,))
    folder = tmp_path_factory.mktemp("res")
    files = {ext: r.save(folder / f"r{ext}").read_bytes() for ext in (".csv", ".csv.gz", ".json")}
    out = folder / "run.csv"
    search.search(TINY, study=True, space=_ROWS, executor="serial", progress=False, baselines=False, out=out,
                  devices=4, global_batch=8, microbatch=(1,), hbm_gib=(0.002,),
                  recompute=(False,), tensor_parallel=(1,))
    files["meta"] = (out.read_bytes(), Path(str(out) + ".meta.json").read_bytes())
    return files


@FAST
@given(ext=st.sampled_from([".csv", ".csv.gz", ".json", "meta"]), cut=st.integers(0, 10 ** 6),
       flips=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(1, 255)), max_size=3))
def test_fuzz_load_result(result_bytes, tmp_path_factory, ext, cut, flips):
    folder = tmp_path_factory.mktemp("lr")
    if ext == "meta":  # a search's rows file with a damaged journal next to it
        rows, meta = result_bytes["meta"]
        path = folder / "run.csv"
        path.write_bytes(rows)
        target, data = Path(str(path) + ".meta.json"), bytearray(meta)
    else:
        path = target = folder / f"r{ext}"
        data = bytearray(result_bytes[ext])
    for pos, x in flips:
        data[pos % len(data)] ^= x
    target.write_bytes(bytes(data[: len(data) - cut % max(1, len(data) // 2)]))
    _check(search.load_result, path)


@pytest.mark.parametrize("meta", ['{"summary": 5}', '{"summary": {"metadata": [1]}}',
                                  '{"summary": {"metadata": {"inputs": {"models": 3}}}}',
                                  '{"chunks": [1], "rows_file": "run.csv"}', "[]"])
def test_load_result_with_damaged_journal_is_one_sentence(tmp_path, meta):
    path = tmp_path / "run.csv"
    search.search(TINY, study=True, space=_ROWS, executor="serial", progress=False, baselines=False, out=path,
                  devices=4, global_batch=8, microbatch=(1,), hbm_gib=(0.002,),
                  recompute=(False,), tensor_parallel=(1,))
    Path(str(path) + ".meta.json").write_text(meta)
    with pytest.raises(ValueError, match="is damaged"):
        search.load_result(path)


def test_schedule_latencies_near_the_float_maximum():
    """Latencies whose total overflows are refused (issue 17, item 9), not scheduled with an
    inf makespan and bound reported as optimal or certified."""
    n = len(_SINGLE)
    for v in (1.7e308, 1e299):
        with pytest.raises(ValueError, match="single and intra must sum to at most"):
            schedule.schedule_layer(_GRAPH, np.full(n, v), np.full(n, v), 1, 1)
        with pytest.raises(ValueError, match="single and intra must sum to at most"):
            schedule.schedule_many(_GRAPH, np.full((n, 2), v), np.full((n, 2), v), [1, 1], [1, 1])
    r = schedule.schedule_layer(_GRAPH, np.full(n, 1e297), np.full(n, 1e297), 1, 1)
    assert math.isfinite(r.makespan) and math.isfinite(r.lower_bound)
    assert r.lower_bound <= r.makespan


@pytest.mark.parametrize("count", [2 ** 63, 2 ** 64, 10 ** 40], ids=["2**63", "2**64", "1e40"])
def test_schedule_core_counts_beyond_int64(count):
    with pytest.raises(ValueError, match="num_tc"):
        schedule.schedule_layer(_GRAPH, _SINGLE[:, 0], _INTRA[:, 0], count, 1)
    with pytest.raises(ValueError, match="num_tc"):
        schedule.schedule_many(_GRAPH, _SINGLE, _INTRA, [count], [1])
