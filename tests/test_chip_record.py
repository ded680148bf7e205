"""The one chip record (issue 23 item 3): phaze.arch.Chip, resolve / resolve_rows, the field
table, the fabric tiers, and the import order of phaze/arch.

* every preset's record equals what the older functions give (row, efficiency set, rates)
  and what its chip file says, read here with the json module alone;
* file → Chip → dict → Chip round trips, optional fields included;
* a bad tdp_w / process_nm / fp8_rate is one sentence naming the field;
* the tiers reproduce the row's link / net numbers exactly as the cost model computes them;
* phaze/arch has no import cycle (lazy imports included) and its modules import in the order
  the face's docstring states.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import pathlib
import re

import numpy as np
import pytest

import phaze.arch as arch
from phaze.arch import (CHIP_FIELDS, ArchSpace, Chip, Tier, dtype_rates, efficiency, load_chip,
                        make_archs, presets, resolve, resolve_chip, resolve_rows)
from phaze import precision
from phaze.arch import _catalog, _fields, rules
from phaze.arch._rows import KNOBS

ARCH_DIR = pathlib.Path(arch.__file__).parent
NAMES = ("tpuv4", "a100-80g", "h100-sxm", "h100-96g")


def _file(name):
    return json.loads((ARCH_DIR / "chips" / f"{name}.json").read_text())


def _naive_preset_of(row):
    """The preset whose file's knobs all equal the row's, by reading the files directly."""
    for name in NAMES:
        data = _file(name)
        if all(row[k] == data[k] for k in KNOBS):
            return name
    return None


def _ruled(name):
    """The full efficiency set of preset ``name`` by reading its file with the json module:
    its measured entries, the rest by ``phaze.arch.rules`` from the other dies'."""
    values = _fields.check_fields(_file(name), name)
    return efficiency.Efficiency(**rules.derive(values, _catalog.MEASURED)[0])


def _rates(data):
    """Every datatype's multiple of the 16-bit rate, from a chip file's fields by hand."""
    fam = {"fp8": data["fp8_rate"], "fp6": data["fp6_rate"], "fp4": data["fp4_rate"]}
    out = {}
    for d in precision.DATATYPES:
        if not d.low_precision:
            out[d.name] = 1.0
        elif d.native and d.native not in data["scaled_formats"]:
            out[d.name] = 0.0
        else:
            out[d.name] = float(fam[d.family])
    return out


def _same_row(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------
# the record of every preset equals the older functions and its file
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_preset_record_equals_old_functions(name):
    chip = resolve(name)
    data = _file(name)
    _same_row(chip.row, presets.get(name))
    for k in KNOBS:
        assert chip.row[k][0] == data[k]
    assert chip.name == name and chip.source == presets.SOURCES[name]
    assert chip.path == str(presets.path(name))
    # efficiency: the file's measured entries, the rest by the rules; efficiency.get and
    # efficiency.for_rows of the row agree
    measured = data.get("efficiency", {})
    assert chip.efficiency == efficiency.get(name) == _ruled(name)
    assert {f: getattr(chip.efficiency, f) for f in measured} == measured
    die = data.get("silicon") or name   # "measured": in the file or on the same die
    on_die = {f for f in _catalog.MEASURED.get(die, {}) if f != "__kinds__"}
    assert {f for f, r in chip.efficiency_rules.items() if r == "measured"} == \
        set(measured) | on_die
    assert chip.efficiency_set() is chip.resolved_efficiency == chip.efficiency
    assert chip.resolved_efficiency.row().tobytes() == efficiency.for_rows(chip.row).tobytes()
    # rates: 1 at 16 bits, the file's fp8/fp6/fp4 rates (0 without the native scaled format)
    assert dict(chip.rates) == _rates(data)
    assert set(chip.rates) == set(precision.DTYPES)
    assert chip.rates["fp8"] == presets.FP8_RATE[name] == dtype_rates.for_rows(chip.row)[0]
    for dtype in precision.DTYPES:
        assert chip.rates[dtype] == dtype_rates.for_rows(chip.row, dtype)[0]
        if chip.rates[dtype]:
            assert chip.tensor_rate(dtype) == chip.rates[dtype]
        else:
            with pytest.raises(ValueError, match=rf"^dtype {dtype} needs .*which {name} does not "
                                                 r"have"):
                chip.tensor_rate(dtype)
    for dtype in ("bf16", "fp16"):
        assert chip.tensor_rate(dtype) == 1.0
    if not data["fp8_rate"]:
        with pytest.raises(ValueError, match="fp8 tensor cores"):
            chip.tensor_rate("fp8")
    assert chip.tdp_w == data.get("tdp_w") and chip.process_nm == data.get("process_nm")
    assert (name, chip.tdp_w, chip.process_nm) in (("tpuv4", None, 7), ("a100-80g", 400, 7),
                                                   ("h100-sxm", 700, 4), ("h100-96g", 500, 4))
    # every entrance gives the same record
    assert resolve_chip(name) is chip is presets.chip(name)
    assert resolve(chip) is chip
    by_row = resolve(presets.get(name))
    assert by_row.name == name and by_row.efficiency == chip.efficiency
    assert dict(by_row.rates) == dict(chip.rates) and by_row.tiers == chip.tiers


def test_custom_row_takes_the_template_rules():
    row = make_archs(base="h100-sxm", num_tc=264)
    chip = resolve(row)
    assert chip.name == "custom" and chip.efficiency is None and chip.fp8_rate is None
    assert _naive_preset_of(row[0]) is None
    assert chip.resolved_efficiency == efficiency.TEMPLATE
    assert chip.resolved_efficiency.row().tobytes() == efficiency.for_rows(row).tobytes()
    assert chip.rates["fp8"] == dtype_rates.TEMPLATE_FP8_RATE == dtype_rates.for_rows(row)[0]


def test_overrides_replace_the_set_and_the_rate():
    chip = resolve("a100-80g", efficiency="template", fp8_rate=2)
    assert chip.efficiency == efficiency.TEMPLATE == chip.efficiency_set()
    assert chip.tensor_rate("fp8") == 2.0 and chip.fp8_rate == 2.0
    assert chip.tiers[0].step_s == efficiency.TEMPLATE.link_step_s
    one_row = efficiency.get("h100-sxm").row()
    assert resolve("tpuv4", efficiency=one_row).efficiency == efficiency.get("h100-sxm")
    assert resolve("tpuv4", efficiency=efficiency.get("h100-sxm")).efficiency_set() \
        == efficiency.get("h100-sxm")
    with pytest.raises(ValueError, match="^fp8_rate must be 0"):
        resolve("h100-sxm", fp8_rate=0.5)
    with pytest.raises(ValueError, match="^efficiency must be None"):
        resolve("h100-sxm", efficiency=3)
    with pytest.raises(KeyError, match="unknown efficiency parameter set"):
        resolve("h100-sxm", efficiency="nope")
    # the preset record itself is unchanged
    assert presets.chip("a100-80g").efficiency == efficiency.get("a100-80g")


def test_resolve_rows_equals_the_per_row_functions():
    space = ArchSpace.default().configs[::997]
    rows = np.concatenate([space, presets.get("a100-80g"), presets.get("h100-sxm"),
                           make_archs(base="tpuv4", clock_ghz=2.0)])
    got = resolve_rows(rows)
    _same_row(got.archs, arch.validate(rows))
    assert got.efficiency.tobytes() == efficiency.for_rows(rows).tobytes()
    np.testing.assert_array_equal(got.fp8_rate, dtype_rates.for_rows(rows))
    # naive: a row's own preset's file, else the template
    for i, row in enumerate(rows):
        name = _naive_preset_of(row)
        want = efficiency.TEMPLATE if name is None else _ruled(name)
        assert got.efficiency[i].tobytes() == want.row()[0].tobytes()
        rate = dtype_rates.TEMPLATE_FP8_RATE if name is None else _file(name)["fp8_rate"]
        assert got.fp8_rate[i] == rate
    # explicit values go through efficiency.rows / dtype_rates.per_row
    fixed = resolve_rows(rows, efficiency="h100-sxm", fp8_rate=1.5)
    assert fixed.efficiency.tobytes() == efficiency.rows("h100-sxm", rows.shape[0]).tobytes()
    np.testing.assert_array_equal(fixed.fp8_rate, np.full(rows.shape[0], 1.5))
    # one chip: its row, its set, its rate
    one = resolve_rows("h100-sxm")
    _same_row(one.archs, presets.get("h100-sxm"))
    assert one.efficiency.tobytes() == efficiency.get("h100-sxm").row().tobytes()
    np.testing.assert_array_equal(one.fp8_rate, [2.0])
    archs_, eff, rates = resolve_rows(presets.get("tpuv4"))
    assert eff.tobytes() == efficiency.get("tpuv4").row().tobytes() and rates[0] == 0.0
    with pytest.raises(ValueError, match="fp8_rate has 2 values"):
        resolve_rows(rows, fp8_rate=[1, 2])


# ---------------------------------------------------------------------------
# the fabric tiers
# ---------------------------------------------------------------------------

def test_tiers_reproduce_the_row_exactly():
    rows = np.concatenate([ArchSpace.default().configs[::1499]]
                          + [presets.get(n) for n in NAMES]
                          + [make_archs(base="a100-80g", link_gb_per_s=123.456789,
                                        net_gb_per_s=0.1 + 0.2, node_size=72)])
    # what the cost model computes (phaze.cost: archs["link_gb_per_s"] * 1e9)
    link_bps, net_bps = rows["link_gb_per_s"] * 1e9, rows["net_gb_per_s"] * 1e9
    for i in range(rows.shape[0]):
        chip = resolve(rows[i:i + 1])
        eff = chip.efficiency_set()
        up, out = chip.tiers
        assert (up, out) == (chip.scale_up, chip.scale_out)
        assert isinstance(up, Tier) and up.name == "scale-up" and out.name == "scale-out"
        assert up.size == rows["node_size"][i] and out.size is None
        assert up.bytes_per_s == link_bps[i] and out.bytes_per_s == net_bps[i]
        assert (up.step_s, up.efficiency, up.p2p_latency_s, up.p2p_efficiency) == (
            eff.link_step_s, eff.link_efficiency, eff.link_p2p_latency_s, eff.link_p2p_efficiency)
        assert (out.step_s, out.efficiency, out.p2p_latency_s, out.p2p_efficiency) == (
            eff.net_step_s, eff.net_efficiency, eff.net_p2p_latency_s, eff.net_p2p_efficiency)
        assert up.topology == out.topology == "switch"
    for word in ("switch", "mesh", "torus"):
        assert Tier("scale-up", 8, 1e9, 0.0, 1.0, 0.0, 1.0, topology=word).topology == word
    with pytest.raises(ValueError, match="^tier scale-up: topology must be one of switch, mesh, "
                                         "torus, got 'ring'$"):
        Tier("scale-up", 8, 1e9, 0.0, 1.0, 0.0, 1.0, topology="ring")


# ---------------------------------------------------------------------------
# the field table, round trips and bad values
# ---------------------------------------------------------------------------

def test_field_table_is_the_one_declaration():
    names = [f.name for f in CHIP_FIELDS]
    assert len(names) == len(set(names))
    assert names[:2] == ["name", "source"]
    assert names[2:2 + len(KNOBS)] == list(KNOBS)
    assert {"fp8_rate", "tdp_w", "process_nm", "efficiency"} <= set(names)
    assert names[2 + len(KNOBS):] == [
        "fp8_rate", "fp6_rate", "fp4_rate", "scaled_formats", "tdp_w", "process_nm",
        "buffer_bytes_per_cycle", "topology", "scale_up_links", "torus_dims", "family", "silicon", "hbm_kind",
        "link_kind", "net_kind", "platform", "efficiency", "cite"]
    assert arch._chipfile.FIELDS == tuple(names)
    kinds = {f.name: f.kind for f in CHIP_FIELDS}
    assert (kinds["fp6_rate"], kinds["fp4_rate"], kinds["scaled_formats"], kinds["topology"],
            kinds["scale_up_links"], kinds["torus_dims"], kinds["cite"]) == (
        "rate", "rate", "formats", "choice", "count", "dims", "cite")
    assert _fields.TOPOLOGIES == ("switch", "mesh", "torus")
    assert _fields.SCALED_FORMATS == ("mx", "nvfp4")
    for f in CHIP_FIELDS:
        assert f.kind in ("text", "lines", "count", "positive", "rate", "efficiency", "formats",
                          "choice", "dims", "cite")
        assert f.domain and f.absent
        assert (f.default is _fields.REQUIRED) == (f.name in KNOBS)
    assert _fields.BY_NAME["tdp_w"].unit == "W" and _fields.BY_NAME["process_nm"].unit == "nm"
    assert _fields.BY_NAME["tdp_w"].default is None
    # to_dict writes the table's order
    chip = dataclasses.replace(presets.chip("h100-sxm"), name="h100-power", tdp_w=700,
                               process_nm=4)
    keys = list(chip.to_dict())
    assert keys == [n for n in names if n in keys]
    assert keys[-1] == "efficiency"
    assert keys.index("tdp_w") + 1 == keys.index("process_nm") < keys.index("efficiency")


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_file_chip_dict_chip(name, tmp_path):
    chip = presets.chip(name)
    path = tmp_path / f"{name}.json"
    path.write_text(chip.to_json())
    back = load_chip(path)
    assert back.to_dict() == chip.to_dict()
    # the record writes the file's fields; its efficiency object what was measured on the
    # chip or its die (the stated rules give the rest again when it is read back), the
    # file's measured entries among them
    written, data = chip.to_dict(), _file(name)
    assert {k: v for k, v in written.items() if k != "efficiency"} == \
        {k: v for k, v in data.items() if k != "efficiency"}
    assert written["efficiency"] == {f: v for f, v in
                                     dataclasses.asdict(chip.resolved_efficiency).items()
                                     if chip.efficiency_rules[f] == "measured"}
    assert back.resolved_efficiency == chip.resolved_efficiency
    measured = data.get("efficiency", {})
    assert {f: written["efficiency"][f] for f in measured} == measured
    again = arch.chip_from_dict(back.to_dict(), name="x")
    for c in (back, again):
        _same_row(c.row, chip.row)
        assert c.efficiency == chip.efficiency and dict(c.rates) == dict(chip.rates)
        assert c.tiers == chip.tiers
        assert c.tdp_w == chip.tdp_w == data.get("tdp_w")
        assert c.process_nm == chip.process_nm == data.get("process_nm")
        assert c.scaled_formats == chip.scaled_formats == tuple(data["scaled_formats"])


def test_round_trip_with_power_and_process(tmp_path):
    data = dict(_file("h100-sxm"), name="h100-power", tdp_w=700, process_nm=4.5)
    del data["efficiency"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    chip = load_chip(path)
    assert chip.tdp_w == 700.0 and chip.process_nm == 4.5
    assert chip.efficiency is None and chip.efficiency_set() == efficiency.get("h100-sxm")
    out = chip.to_dict()
    assert out["tdp_w"] == 700 and isinstance(out["tdp_w"], int) and out["process_nm"] == 4.5
    assert "efficiency" not in out
    path2 = tmp_path / "again.json"
    path2.write_text(chip.to_json())
    back = load_chip(path2)
    assert back.to_dict() == out and back.tdp_w == chip.tdp_w
    _same_row(back.row, chip.row)
    # the new fields change no number: the same rates, set and tiers as the preset
    ref = presets.chip("h100-sxm")
    assert dict(back.rates) == dict(ref.rates) and back.tiers == ref.tiers
    # a preset's name with a power other than the preset's 700 W is a changed chip
    arch.chip_from_dict(dict(_file("h100-sxm"), tdp_w=700))
    with pytest.raises(ValueError, match=r"name 'h100-sxm' is a preset's, but tdp_w is 600.0 "
                                         r"where the preset has 700.0; give the changed chip"):
        arch.chip_from_dict(dict(_file("h100-sxm"), tdp_w=600))


@pytest.mark.parametrize("field", ["tdp_w", "process_nm"])
@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "700", True, None, [700]])
def test_bad_optional_number_is_one_sentence_naming_the_field(field, bad, tmp_path):
    path = tmp_path / "bad.json"
    data = dict(_file("a100-80g"), name="mine", **{field: bad})
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as exc:
        load_chip(path)
    msg = str(exc.value)
    unit = _fields.BY_NAME[field].unit
    assert msg.startswith(f"chip file {str(path)!r}: {field} must be a finite number > 0 ({unit}), got ")
    assert "\n" not in msg and msg.count(". ") == 0
    with pytest.raises(ValueError, match=f"^chip 'mine': {field} must be a finite number > 0"):
        Chip(name="mine", row=presets.get("a100-80g"), **{field: bad if bad is not None else -1})


def test_bad_values_of_a_python_record():
    row = presets.get("tpuv4")
    with pytest.raises(ValueError, match="^chip 'x': fp8_rate must be 0"):
        Chip(name="x", row=row, fp8_rate=0.5)
    with pytest.raises(ValueError, match="^chip: name must be a non-empty line"):
        Chip(name="", row=row)
    with pytest.raises(ValueError, match="^chip 'x': efficiency must be None or a"):
        Chip(name="x", row=row, efficiency={"hbm_efficiency": 0.5})
    with pytest.raises(ValueError, match="^chip 'x': row must be one architecture, got 2 rows"):
        Chip(name="x", row=np.concatenate([row, row]))
    with pytest.raises(ValueError, match="^clock_ghz must be finite and > 0"):
        Chip(name="x", row=_neg_clock())
    # a writable row is copied and frozen; the caller's array stays its own
    mine = presets.get("tpuv4")
    chip = Chip(name="x", row=mine)
    assert not chip.row.flags.writeable and mine.flags.writeable and chip.row is not mine


def _neg_clock():
    row = presets.get("tpuv4")
    row["clock_ghz"] = -1.0
    return row


def test_preset_citation_rule():
    data = _file("a100-80g")
    data["source"] = [ln for ln in data["source"] if not ln.startswith("tdp_w ")]
    values = _fields.check_fields(data, "preset file x")
    with pytest.raises(ValueError, match="^preset file x: tdp_w needs a source line starting "
                                         "with 'tdp_w '"):
        _fields.check_citations(values, "preset file x")
    values["source"] += "\ntdp_w 400: NVIDIA A100 datasheet, SXM4 80 GB."
    _fields.check_citations(values, "preset file x")
    for name in NAMES:  # the shipped files cite every field they give by a source line
        _fields.check_citations(_fields.check_fields(_file(name), name), name)
    # a preset with a cite object cites there every field and efficiency entry it gives
    data = dict(_file("h100-sxm"), name="y")
    cite = {f.name: "a source" for f in CHIP_FIELDS if f.name in data
            and f.cite != _fields.CITE_NONE and f.kind != "efficiency"}
    cite.update({"efficiency." + e: "a measurement" for e in data["efficiency"]})
    _fields.check_citations(_fields.check_fields(dict(data, cite=cite), "p"), "p")
    short = {k: v for k, v in cite.items() if k not in ("hbm_gb_per_s", "efficiency.launch_s")}
    short.pop("efficiency.hbm_efficiency")
    with pytest.raises(ValueError, match="^p: cite has no line for hbm_gb_per_s, "
                                         "efficiency.hbm_efficiency; every number a preset "
                                         "gives needs its source$"):
        _fields.check_citations(_fields.check_fields(dict(data, cite=short), "p"), "p")
    extra = dict(cite, torus_dims="none", **{"efficiency.launch_s": "not given"})
    with pytest.raises(ValueError, match="^p: cite names torus_dims, efficiency.launch_s, which "
                                         "the file does not give$"):
        _fields.check_citations(_fields.check_fields(dict(data, cite=extra), "p"), "p")


# ---------------------------------------------------------------------------
# import order of phaze/arch
# ---------------------------------------------------------------------------

def _arch_imports():
    """module → the phaze.arch modules it imports (top-level and inside functions alike)."""
    mods = {p.stem: p for p in ARCH_DIR.glob("*.py")}
    mods["__init__"] = ARCH_DIR / "__init__.py"
    graph = {}
    for mod, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.startswith("phaze.arch"):
                rest = node.module[len("phaze.arch"):].lstrip(".")
                deps.update([rest.split(".")[0]] if rest else ["__init__"])
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("phaze.arch"):
                        rest = a.name[len("phaze.arch"):].lstrip(".")
                        deps.add(rest.split(".")[0] if rest else "__init__")
        graph[mod] = {d for d in deps if d in mods and d != mod}
    return graph


def test_no_import_cycle_in_arch():
    graph = _arch_imports()
    done, stack = set(), []

    def visit(mod):
        if mod in stack:
            pytest.fail(f"import cycle in phaze/arch: {' -> '.join(stack[stack.index(mod):] + [mod])}")
        if mod in done:
            return
        stack.append(mod)
        for dep in sorted(graph[mod]):
            visit(dep)
        stack.pop()
        done.add(mod)

    for mod in sorted(graph):
        visit(mod)
    assert "__init__" not in set().union(*(graph[m] for m in graph if m != "__init__"))


def test_modules_import_in_the_order_the_face_states():
    doc = arch.__doc__
    part = doc[doc.index("Modules, each importing only those before it"):]
    steps = part.split("this face")[0].split("→")
    order = [re.search(r"``(\w+)``", step).group(1) for step in steps if "``" in step]
    graph = _arch_imports()
    assert sorted(order) == sorted(m for m in graph if m != "__init__")
    for i, mod in enumerate(order):
        later = graph[mod] - set(order[:i])
        assert not later, f"phaze/arch/{mod}.py imports {sorted(later)}, stated after it"
    assert graph["__init__"] <= set(order)


def test_gemm_rates_measured_says_whether_the_tile_efficiency_is_a_measured_figure():
    import dataclasses

    from phaze.arch import resolve_chip
    from phaze.step import template_cap
    h100 = resolve_chip("h100-sxm")
    assert h100.efficiency_rules["tile_efficiency"] == "measured"
    assert h100.gemm_rates_measured and template_cap(h100, None) == float("inf")
    ruled = dataclasses.replace(h100, efficiency_rules={"tile_efficiency": "rule"})
    assert not ruled.gemm_rates_measured
    assert template_cap(ruled, None) == float(h100.tdp_w)
    assert not dataclasses.replace(h100, efficiency_rules=None).gemm_rates_measured
    assert template_cap(h100, 300.0) == 300.0
