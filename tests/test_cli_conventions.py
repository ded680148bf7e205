"""One numbering and unit convention across place, evaluate and search (issue 16, item 5):
stages from 1, memory in GiB with the unit in the header, seconds marked 's'; documented in
--help; evaluate --json's microbatch count is the number per pipeline."""
import json
import re
import pytest

from phaze import cli, placement

def _help(capsys, command):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["place", "evaluate", "search"])
def test_help_documents_the_convention(capsys, command):
    text = _help(capsys, command)
    assert "numbered from 1" in text and "GiB per device" in text and "seconds" in text


def _stage_rows(text):
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.split()[:1] == ["stage"])
    rows = []
    for ln in lines[i + 1:]:
        if not re.match(r"\s+\d+\s", ln):
            break
        rows.append(ln.split())
    return lines[i], rows


def test_place_numbers_stages_from_one_in_gib(capsys, golden):
    path = golden / "placement_bench_gpt3_1024.json"
    assert cli.main(["place", str(path)]) == 0
    header, rows = _stage_rows(capsys.readouterr().out)
    assert "load (s)" in header and "memory (GiB)" in header
    plan = placement.solve(placement.load_phaze_json(path))
    assert [int(r[0]) for r in rows] == list(range(1, len(plan.stages) + 1))
    for r, mem in zip(rows, plan.stage_memory):
        assert float(r[-1]) == pytest.approx(mem / 2**30, abs=0.006)


def test_evaluate_numbers_stages_from_one_in_gib(capsys):
    assert cli.main(["evaluate", "--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "2",
                     "--microbatch", "2", "--study"]) == 0
    out = capsys.readouterr().out
    header, rows = _stage_rows(out)
    assert "compute (s)" in header and "memory (GiB)" in header
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert "microbatches per pipeline 1024" in out
    assert re.search(r"time per batch [\d.]+ s", out)


def test_evaluate_json_microbatches_per_pipeline(capsys):
    assert cli.main(["evaluate", "--model", "gpt2-xl", "--tp", "1", "--pp", "4", "--dp", "8",
                     "--microbatch", "2", "--global-batch", "512", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["microbatches_per_pipeline"] == 512 // (2 * 8)
    assert "microbatches" not in r
    assert r["breakdown"]["critical_stage"] in (1, 2, 3, 4)


def test_search_summary_header_has_units(capsys):
    rc = cli.main(["search", "--model", "gpt2-xl", "--space-every", "20000", "--serial",
                   "--no-baselines", "--no-progress", "--tp", "1", "--microbatch", "1",
                   "--hbm-gib", "80", "--recompute", "on"])
    out = capsys.readouterr().out
    assert rc == 0 and "HBM GiB" in out and " s (" in out


def test_search_help_has_the_column_legend(capsys):
    text = _help(capsys, "search")
    legend = text[text.index("summary columns"):]
    for column in ("t / p / d", "mb ", "HBM GiB", "rc ", "samples/s", "tokens/s", "vs tpuv4",
                   "vs fixed", "vs block", "normalised score"):
        assert column in legend, column


def test_legend_names_every_summary_column(capsys):
    rc = cli.main(["search", "--model", "gpt2-xl", "--space-every", "20000", "--serial",
                   "--no-progress", "--tp", "1", "--microbatch", "1", "--hbm-gib", "80",
                   "--recompute", "on"])
    out = capsys.readouterr().out
    header = next(ln for ln in out.splitlines() if ln.startswith("model "))
    legend = cli.SEARCH_LEGEND
    for word in header.replace("vs ", "vs_").replace("HBM GiB", "HBM_GiB").split()[1:]:
        word = word.replace("_", " ")
        assert word in legend, word
