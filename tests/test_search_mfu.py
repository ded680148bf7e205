"""MFU in result rows and summaries (issue 16, item 5), and result files from before the
column still load."""
import csv
import io
import json
import math

import numpy as np
import pytest

from phaze import arch, cli, models, search
from phaze.search import _table

from test_search_calibrated import _cut_journal_after_first_chunk

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
KNOBS = dict(study=True, devices=4, global_batch=8, microbatch=(1, 2), hbm_gib=(1.0,), recompute=(False,),
             tensor_parallel=(1,), executor="serial", progress=False, baselines=False)
ROWS = arch.ArchSpace.default().configs[[100, 5000]]


def test_flops_count_is_palms():
    m = models.get("gpt3-175b")
    # PaLM's count: 6N per token plus 12·L·heads·head_dim·s attention FLOPs per token.
    n = m.n_params - m.max_positions * m.hidden   # tied table used by the head, positions not
    want = 6 * n * m.seq_len + 12 * m.n_layers * m.hidden * m.seq_len ** 2
    assert _table.model_flops_per_sample(m) == pytest.approx(want)
    # Within a few percent of Megatron's closed form for a GPT model.
    assert _table.model_flops_per_sample(m) == pytest.approx(models.gemm_flops_per_sample(m),
                                                              rel=0.03)


def test_untied_table_is_not_counted():
    m = models.get("llama2-7b")
    assert not m.tied_embeddings
    n = m.n_params - m.vocab * m.hidden
    assert _table.model_flops_per_sample(m) == pytest.approx(
        6 * n * m.seq_len + 12 * m.n_layers * m.heads * m.head_dim * m.seq_len ** 2)


def test_rows_have_mfu_by_its_definition():
    r = search.search(TINY, space=ROWS, **KNOBS)
    t = r.table
    peak = arch.peak_flops(ROWS)
    ok = t["feasible"]
    assert ok.any()
    rows = np.searchsorted(np.array([100, 5000]), t["arch_id"])
    want = (_table.model_flops_per_sample(TINY) * t["samples_per_s"]
            / (t["devices_used"] * peak[rows]))
    assert np.allclose(t["mfu"][ok], want[ok])
    assert np.all(t["mfu"][~ok] == 0) and np.all((t["mfu"] >= 0) & (t["mfu"] < 1))
    assert "MFU" in r.format_summary() and "%" in r.format_summary()


def test_evaluate_point_mfu():
    r = search.evaluate_point("gpt3-175b", "tpuv4", 8, 16, 8, 1, True, hbm_gib=80)
    peak = arch.peak_flops(arch.presets.get("tpuv4"))[0]
    want = r["model_flops_per_sample"] * r["samples_per_s"] / (1024 * peak)
    assert r["mfu"] == pytest.approx(want) and 0.05 < r["mfu"] < 0.9


def test_cli_evaluate_prints_mfu(capsys):
    assert cli.main(["evaluate", "--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "2"]) == 0
    assert "MFU " in capsys.readouterr().out


def test_mfu_column_is_last_and_round_trips(tmp_path):
    # mfu, then only the columns added after it (issue 28's power and cost), in file order
    names = [n for n, _ in search.TABLE_COLUMNS]
    assert names[names.index("mfu") + 1:] == ["power_w", "clock_fraction", "energy_per_step_j",
                                              "tokens_per_joule", "chip_cost_usd",
                                              "usd_per_million_tokens"]
    r = search.search(TINY, space=ROWS, **KNOBS)
    for ext in (".csv", ".json"):
        path = r.save(tmp_path / f"r{ext}")
        back = search.load_result(path)
        assert back.table["mfu"][0] == pytest.approx(r.top_rows()["mfu"][0] if ext == ".json"
                                                      else r.table["mfu"][0])


def test_files_without_the_mfu_column_still_load(tmp_path):
    r = search.search(TINY, space=ROWS, **KNOBS)
    csv_path = r.save(tmp_path / "r.csv")
    text = csv_path.read_text().splitlines()
    rows = list(csv.reader(text))
    cut = rows[0].index("mfu")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([row[:cut] + row[cut + 1:] for row in rows])
    csv_path.write_text(buf.getvalue())
    old = search.load_result(csv_path)
    assert len(old) == len(r) and np.all(np.isnan(old.table["mfu"]))
    assert np.array_equal(old.table["samples_per_s"], r.table["samples_per_s"])
    assert "n/a" in old.format_summary()

    json_path = r.save(tmp_path / "r.json")
    doc = json.loads(json_path.read_text())
    for row in doc["top_rows"]:
        del row["mfu"]
    json_path.write_text(json.dumps(doc))
    back = search.load_result(json_path)
    assert np.all(np.isnan(back.table["mfu"])) and len(back) == len(doc["top_rows"])


def test_resume_fills_mfu_of_rows_written_without_it(tmp_path):
    out = tmp_path / "r.csv"
    kw = dict(KNOBS, chunk_archs=1, out=out)
    full = search.search(TINY, space=ROWS, **kw, force=True)
    # Drop the mfu column and the second chunk, as an older interrupted run would leave it.
    rows = list(csv.reader(out.read_text().splitlines()))
    cut = rows[0].index("mfu")
    chunk = rows[0].index("chunk")
    kept = [rows[0]] + [r for r in rows[1:] if r[chunk] == "0"]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:cut] + r[cut + 1:] for r in kept])
    out.write_text(buf.getvalue())
    _cut_journal_after_first_chunk(tmp_path / "r.csv.meta.json")
    # ... and its journal: no chunk checksums, no header then (issue 30 added them)
    meta_path = tmp_path / "r.csv.meta.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("header", None)
    for facts in meta["chunks"].values():
        facts.pop("digest", None)
    meta_path.write_text(json.dumps(meta))
    resumed = search.search(TINY, space=ROWS, **kw, resume=True)
    assert resumed.metadata["resumed_chunks"] == 1
    assert np.allclose(resumed.table["mfu"], full.table["mfu"])
