"""Issue 30: chip rates near the float maximum saturate to inf in SI units, without a
numpy overflow warning (the cost model's SI columns, the fabric tiers, peak FLOP/s)."""
import warnings

import numpy as np

from phaze.arch import _chipfile, _rows, resolve_chip
from phaze.cost import _latency

RATES = ("clock_ghz", "hbm_gb_per_s", "link_gb_per_s", "net_gb_per_s")


def _rows_near_max():
    row = resolve_chip("h200").row
    archs = np.concatenate([row, row])
    for f in RATES:
        archs[f][1] = 1.7e308
    return archs


def test_rates_near_the_float_maximum_saturate_without_a_warning():
    archs = _rows_near_max()
    chip = resolve_chip("h200")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        si = _latency._si(archs)
        peak = _rows.peak_flops(archs)
        tiers = _chipfile.tiers_of(archs[1:], chip.resolved_efficiency)
        normal = _chipfile.tiers_of(archs[:1], chip.resolved_efficiency)
    # the normal row exactly as formed before: GHz · 10⁹, GB/s · 10⁹
    assert si["clock_hz"][0] == archs["clock_ghz"][0] * 1e9
    assert si["hbm_bytes_per_s"][0] == archs["hbm_gb_per_s"][0] * 1e9
    assert peak[0] == (float(archs["num_tc"][0]) * archs["tc_width"][0] * archs["tc_depth"][0]
                       * 2.0 * archs["clock_ghz"][0] * 1e9)
    assert normal[0].bytes_per_s == float(archs["link_gb_per_s"][0] * 1e9)
    assert normal[1].bytes_per_s == float(archs["net_gb_per_s"][0] * 1e9)
    # the huge row: inf
    assert si["clock_hz"][1] == np.inf and si["hbm_bytes_per_s"][1] == np.inf
    assert peak[1] == np.inf
    assert tiers[0].bytes_per_s == np.inf and tiers[1].bytes_per_s == np.inf


def test_a_chip_file_near_the_float_maximum_evaluates_and_searches_without_a_warning(tmp_path):
    """End to end, as a user writes such a chip: ``phaze evaluate`` and a fixed-chip search
    price it (energy, die area, cost: inf where the rates are, no RuntimeWarning)."""
    import json
    from pathlib import Path

    from phaze import cli

    chip = json.loads((Path(_chipfile.__file__).parent / "chips" / "h200.json").read_text())
    for f in RATES:
        chip[f] = 1.7e308
    chip["name"] = "huge"
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(chip))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.main(["evaluate", "--model", "bert-large", "--arch", str(path), "--tp", "1",
                         "--pp", "1", "--dp", "8", "--microbatch", "1",
                         "--global-batch", "8"]) == 0
        assert cli.main(["search", "--model", "bert-large", "--devices", "8",
                         "--global-batch", "8", "--arch", str(path), "--no-baselines"]) == 0
