"""The preset h100-96g (issue 25): the H100 of pytorch/torchtitan's H100 benchmarks (Meta
Grand Teton, 96 GB HBM2e at 2.4 TB/s, 8 per host on NVLink, 400 Gb/s RDMA per GPU).

Its knobs are the torchtitan benchmarks' figures and h100-sxm's compute; its efficiency set
is h100-sxm's, copied. Magnitudes: an HBM-bound operator is priced at its bytes over
0.90 × 2,400 GB/s plus the launch gap, by hand, and a GEMM as on h100-sxm.
"""
import json

import numpy as np
import pytest

from phaze import arch, cli, cost
from phaze.arch import efficiency, presets
from phaze.graph import build_layers

_DIFFERENT = ("hbm_gib", "hbm_gb_per_s", "area_mm2")


def test_knobs_are_the_benchmarks_figures():
    row = presets.get("h100-96g")[0]
    assert row["hbm_gib"] == 96.0 and row["hbm_gb_per_s"] == 2400.0   # "96GB HBM2e", "2.4 TB/sec"
    assert row["node_size"] == 8 and row["link_gb_per_s"] == 450.0    # 8 per host, NVLink 4
    assert row["net_gb_per_s"] == 400e9 / 8 / 1e9                     # "400 Gb/s per GPU"
    sxm = presets.get("h100-sxm")[0]
    for knob in row.dtype.names:
        if knob not in _DIFFERENT:
            assert row[knob] == sxm[knob], knob
    # 528 tensor cores of 16×32 at the 1,830 MHz boost clock: 989.4 TFLOP/s dense bf16
    peak = 528 * 16 * 32 * 2 * 1.83e9
    assert arch.peak_flops(presets.get("h100-96g"))[0] == pytest.approx(peak, rel=1e-12)
    assert presets.VENDOR_PEAK_FLOPS["h100-96g"] == pytest.approx(peak, rel=5e-3)


def test_efficiency_and_fp8_rate_are_h100_sxm_s():
    # h100-sxm's set but the GEMM fractions, measured on a 500 W H100 (FBGEMM PR #2546)
    gemm = ("tile_efficiency", "fp8_tile_efficiency", "flash_fwd_efficiency",
            "flash_bwd_efficiency")
    ours, sxm = presets.EFFICIENCY["h100-96g"], presets.EFFICIENCY["h100-sxm"]
    assert {k: v for k, v in ours.items() if k not in gemm} == \
        {k: v for k, v in sxm.items() if k not in gemm}
    assert ours["tile_efficiency"] < sxm["tile_efficiency"]
    # the flash fractions: FlashAttention-2's over the 700 W part's GEMM ratio (by hand)
    ratio = ours["tile_efficiency"] / sxm["tile_efficiency"]
    assert ours["flash_fwd_efficiency"] == pytest.approx(335e12 / 989.43e12 * ratio, rel=1e-12)
    assert ours["flash_bwd_efficiency"] == pytest.approx(322e12 / 989.43e12 * ratio, rel=1e-12)
    chip = presets.chip("h100-96g")
    assert chip.fp8_rate == 2 and chip.tensor_rate("fp8") == 2.0
    assert chip.tdp_w == 500           # the hosts' 500 W limit, recorded (issue 28 prices power)
    source = presets.SOURCES["h100-96g"]
    for needle in ("torchtitan", "96GB HBM2e", "2.4 TB/s", "500 W", "h100-sxm's block",
                   "presets.py", "FBGEMM PR #2546"):
        assert needle in source, needle


def test_rows_are_told_apart_from_h100_sxm():
    rows = np.concatenate([presets.get("h100-sxm"), presets.get("h100-96g"),
                           arch.make_archs(base="h100-sxm", hbm_gb_per_s=2400.0)])
    names = [arch.resolve(rows[i:i + 1]).name for i in range(3)]
    assert names == ["h100-sxm", "h100-96g", "custom"]        # the third row is no preset
    eff = efficiency.for_rows(rows)
    assert eff[1].tobytes() == efficiency.get("h100-96g").row()[0].tobytes()
    assert eff[2].tobytes() == efficiency.TEMPLATE.row()[0].tobytes()


def test_hbm_bound_operator_priced_by_hand():
    g = build_layers("llama2-7b", 1, 1).layers[1].forward
    rows = np.concatenate([presets.get("h100-sxm"), presets.get("h100-96g")])
    _, intra = cost.op_latencies(g, rows, model="calibrated", efficiency=efficiency.for_rows(rows))
    eff = efficiency.get("h100-96g")
    k = g.names.index("ln1")            # RMSNorm over 4096 × 4096 bf16: read and write
    nbytes = int(g.bytes_in[k] + g.bytes_out[k])
    assert nbytes == 2 * 2 * 4096 * 4096 + 2 * 4096
    assert intra[k, 1] == pytest.approx(nbytes / (eff.hbm_efficiency * 2400e9) + eff.launch_s,
                                        rel=1e-12)
    assert intra[k, 0] == pytest.approx(nbytes / (eff.hbm_efficiency * 3350e9) + eff.launch_s,
                                        rel=1e-12)
    # a large GEMM is compute-bound on both: slower on the 500 W part by the ratio of their
    # measured GEMM fractions
    q = g.names.index("q_proj")
    ratio = (intra[q, 1] - eff.launch_s) / (intra[q, 0] - eff.launch_s)
    assert ratio == pytest.approx(efficiency.get("h100-sxm").tile_efficiency
                                  / eff.tile_efficiency, rel=1e-9)


def test_cli_lists_and_shows_it(capsys):
    assert cli.main(["archs"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("h100-96g "))
    assert "96" in line.split() and "2400" in line.split() and "989.4" in line.split()
    assert cli.main(["archs", "--show", "h100-96g"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "h100-96g" and shown["hbm_gb_per_s"] == 2400.0


#: pytorch/FBGEMM PR #2546 (2024-04-29), "H100 500W": (M, N, K) → (bf16 cuBLAS seconds, fp8
#: row-wise GEMM kernel alone seconds).
FBGEMM_500W = {(8192, 8192, 8192): (1.879e-3, 0.977e-3),
               (65536, 8192, 7168): (13.383e-3, 7.108e-3),
               (65536, 3584, 8192): (7.044e-3, 3.372e-3)}


@pytest.mark.parametrize("shape", sorted(FBGEMM_500W))
def test_gemms_at_the_500w_measurement(shape):
    """The 500 W part's GEMM fractions come from 8192³; the other two shapes of the same
    measurement are then priced within 10 %."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_gemm_efficiency import _seconds

    m, n, k = shape
    bf16, fp8 = FBGEMM_500W[shape]
    assert _seconds("h100-96g", 1, m, k, n) == pytest.approx(bf16, rel=0.10)
    assert _seconds("h100-96g", 1, m, k, n, fp8=True) == pytest.approx(fp8, rel=0.10)
