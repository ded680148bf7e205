"""phaze.search: an architecture id is its row in the full space, under any subset (issue 16)."""
import numpy as np
import pytest

from phaze import arch, cli, models, search

TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
KNOBS = dict(study=True, devices=4, global_batch=8, microbatch=(1,), hbm_gib=(1.0,), recompute=(False,),
             tensor_parallel=(1,), executor="serial", progress=False, chunk_archs=2)


def _same_arch(table, rows):
    """Every row's knobs are those of the default space's row its arch_id names."""
    for f in ("num_tc", "tc_width", "tc_depth", "num_vc", "vc_width", "buffer_mib", "area_mm2"):
        np.testing.assert_array_equal(table[f], rows[table["arch_id"]][f])


@pytest.mark.parametrize("select", [slice(None, None, 7001), [20000, 5, 9000, 17]])
def test_ids_are_rows_of_the_default_space(select):
    rows = arch.ArchSpace.default().configs
    r = search.search(TINY, space=rows[select], baselines=True, **KNOBS)
    expected = np.arange(len(rows))[select]
    assert sorted(set(r.table["arch_id"].tolist())) == sorted(expected.tolist())
    _same_arch(r.table, rows)
    assert r.best["arch_id"] in expected
    block = r.baselines["block_optimal"]["models"]["tiny"]
    assert block["arch_id"] in expected
    np.testing.assert_array_equal(rows[block["arch_id"]]["area_mm2"], block["area_mm2"])
    assert r.metadata["inputs"]["arch_ids"] == "default space"


def test_ids_of_a_space_outside_the_default_are_its_rows():
    own = arch.ArchSpace.default().configs[[3, 9]].copy()
    own["hbm_gb_per_s"] = [111.0, 222.0]  # not a row of the default space any more
    own = arch.validate(own)
    r = search.search(TINY, space=own, baselines=False, **KNOBS)
    assert set(r.table["arch_id"].tolist()) == {0, 1}
    assert r.metadata["inputs"]["arch_ids"] == "given space"


def test_resume_and_result_file_keep_the_ids(tmp_path):
    rows = arch.ArchSpace.default().configs
    out = tmp_path / "r.csv"
    r = search.search(TINY, space=rows[::9000], baselines=False, out=out, **KNOBS)
    back = search.load_result(out)
    np.testing.assert_array_equal(np.sort(back.table["arch_id"]), np.sort(r.table["arch_id"]))
    again = search.search(TINY, space=rows[::9000], baselines=False, out=out, resume=True, **KNOBS)
    np.testing.assert_array_equal(again.table["arch_id"], r.table["arch_id"])


def test_cli_space_every_reports_default_space_ids(capsys):
    rc = cli.main(["search", "--model", "opt-350m", "--devices", "16", "--global-batch", "32",
                   "--microbatch", "1", "--hbm-gib", "32", "--recompute", "off", "--tp", "1",
                   "--space-every", "7000", "--serial", "--no-baselines", "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0
    aid = int(text.split("best architecture (id ")[1].split(")")[0])
    assert aid % 7000 == 0  # a row of the default space, not of the subset (0..4)
