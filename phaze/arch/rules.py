"""The stated rules that give a chip the efficiency parameters nobody measured on it
(issue 26, item 4: "a chip it has never seen").

A chip file's ``efficiency`` object holds only what was measured on that chip (each value
cited). Every other parameter comes from :func:`derive`, which reads nothing but the
chip's datasheet fields and the parameters *measured* on other silicon — never a
rule-derived value, never a value of the same die (``silicon``): the measurements of one
die are one source, however many presets carry it. So the H100's own measurements can be
held out and its parameters predicted from the other chips' (``bench/bench_rules.py``).

The rules (each in terms of what the datasheet gives):

- **GEMM tile** (``tile_*_mult``, ``cores_per_tile``, ``k_stages``): a chip whose tensor
  cores are narrow MMA units grouped in SMs or CUs (array width ≤ 64) takes the CUTLASS
  kernel measured on A100 and H100 — 256 × 128 output tiles dealt to groups of 4 tensor
  cores, K-steps of 2 array depths, 3 pipeline stages — in its own array widths
  (tile_m_mult = 256 / tc_width, tile_n_mult = 128 / tc_width); a chip of wide systolic
  arrays (> 64: TPU MXUs, Gaudi MMEs) the template's one array per tile with no per-tile
  K fill (its fill is in the template's array model).
- **Fractions of a peak** (``tile_efficiency``, ``hbm_efficiency``,
  ``attention_hbm_efficiency``) and **latencies** (``launch_s``, ``coll_latency_s``,
  ``*_step_s``, ``*_p2p_latency_s``): the mean of the values measured on the other dies.
- **Ratios** (``fp8_tile_efficiency``, ``flash_fwd_efficiency``, ``flash_bwd_efficiency``):
  the chip's own ``tile_efficiency`` (measured or by the rule) times the mean ratio to
  ``tile_efficiency`` on the other dies that measured both.
- **Fabric fractions** (``link_efficiency``, ``link_p2p_efficiency`` by ``link_kind``;
  ``net_efficiency``, ``net_p2p_efficiency`` by ``net_kind``): the mean over the other dies
  measured on the same kind of fabric, else over every other die measured.
- **Torus** (``topology`` "torus"): ``link_gb_per_s`` is the chip's aggregate over its
  ``scale_up_links``; a ring collective (XLA's and the Neuron runtime's are rings per
  dimension) runs along one dimension at a time over that dimension's two links, so a
  derived ``link_efficiency`` / ``link_p2p_efficiency`` is the fabric mean times
  2 / ``scale_up_links`` (a 3-D torus: 1/3). Several dimensions driven at once would give
  more; the rule prices the dimension-by-dimension algorithm. A mesh (MI300X's, Gaudi 3's
  all-to-all links) takes the switch's fraction: the full domain's ring uses every link.
- **NCCL's LL/LL128 protocols** (``ll_*``, ``ll128_*``: tuning.cc's constants at the
  chip's NCCL version, sheet §4.4): latencies as above, the mean over the other dies that
  state them; a bus-bandwidth cap or share (``*_gb_per_s``, ``ll128_share``) the mean over
  the other dies where it is > 0 (0 says the protocol is not run there, nothing about its
  bandwidth); none stated: 0, Simple only.
- A field no other die measured falls back to the template's tile rule value (integers) or
  is refused (a bug in the shipped data: every fraction and latency is measured somewhere).

Depends only on ``_efields`` (the parameters' names), so that ``_catalog`` can apply it
while the presets are read.
"""
from __future__ import annotations

from ._efields import EFFICIENCY_DTYPE, INT_FIELDS, PROTOCOL_FIELDS, RATES, SHARES

__all__ = ["RATIO_FIELDS", "FABRIC_FIELDS", "TORUS_FIELDS", "derive", "measured_table"]

#: Arrays at most this wide are MMA units of an SM/CU (the GPU tile rule applies).
GPU_ARRAY_WIDTH = 64
#: The GPU tile rule (CUTLASS SM80/SM90 kernels measured on A100 and H100: sheet §1.2), in
#: output elements and array depths, and the template's systolic rule.
GPU_TILE = dict(tile_m=256, tile_n=128, tile_k_mult=2, cores_per_tile=4, k_stages=3)
SYSTOLIC_TILE = dict(tile_m_mult=1, tile_n_mult=1, tile_k_mult=1, cores_per_tile=1, k_stages=1)
#: Fields set as a ratio to the chip's own tile_efficiency.
RATIO_FIELDS = ("fp8_tile_efficiency", "flash_fwd_efficiency", "flash_bwd_efficiency")
#: Fabric fractions and the chip field that groups them.
FABRIC_FIELDS = {"link_efficiency": "link_kind", "link_p2p_efficiency": "link_kind",
                 "net_efficiency": "net_kind", "net_p2p_efficiency": "net_kind"}
#: Fabric fractions of the scale-up tier that a torus's ring collectives see only in part.
TORUS_FIELDS = ("link_efficiency", "link_p2p_efficiency")


def _tile(values) -> dict:
    w = int(values["tc_width"])
    if w <= GPU_ARRAY_WIDTH:
        return dict(tile_m_mult=max(1, GPU_TILE["tile_m"] // w),
                    tile_n_mult=max(1, GPU_TILE["tile_n"] // w),
                    tile_k_mult=GPU_TILE["tile_k_mult"], cores_per_tile=GPU_TILE["cores_per_tile"],
                    k_stages=GPU_TILE["k_stages"])
    return dict(SYSTOLIC_TILE)


def _mean(xs):
    return sum(xs) / len(xs)


def derive(values: dict, measured: dict) -> tuple:
    """``(efficiency, why)``: every efficiency parameter of the chip whose checked file
    fields are ``values`` — its own measured ones (``values["efficiency"]``, then those
    measured on its die, ``measured[silicon]``) kept, the rest by the module's rules from
    the other dies of ``measured`` (silicon → {field: value} of what was measured on each;
    :func:`measured_table`) — and for every field "measured" or the rule in words (what
    ``Chip.efficiency_rules`` and ``phaze archs --show`` say). To hold a die
    out (predict it as never seen), pass ``values`` without ``efficiency`` and ``measured``
    without its entry."""
    silicon = values.get("silicon") or values.get("name")
    # what was measured on this chip, then on its die (another part of the same silicon)
    own = {k: v for k, v in measured.get(silicon, {}).items() if k != "__kinds__"}
    own.update(values.get("efficiency") or {})
    others = {s: m for s, m in measured.items() if s != silicon}
    kinds = {s: m.get("__kinds__", {}) for s, m in others.items()}
    out, rules = {}, {}
    tile = _tile(values)
    for f in INT_FIELDS:
        if f in own:
            out[f] = own[f]
        else:
            out[f] = tile[f]
            rules[f] = ("GPU tile rule (arrays <= 64 wide: 256x128 tiles of 4 cores, "
                        "K-step 2 depths, 3 stages)" if int(values["tc_width"]) <= GPU_ARRAY_WIDTH
                        else "systolic template rule (one array per tile, no K fill)")
    names = [n for n in EFFICIENCY_DTYPE.names if n not in INT_FIELDS]
    # plain means first (tile_efficiency is needed by the ratios)
    for f in names:
        if f in own:
            out[f] = own[f]
            continue
        if f in RATIO_FIELDS:
            continue
        pool = [m[f] for m in others.values() if f in m]
        where = "every other die"
        if f in FABRIC_FIELDS and values.get(FABRIC_FIELDS[f]) is not None:
            kind = values[FABRIC_FIELDS[f]]
            same = [m[f] for s, m in others.items() if f in m
                    and kinds[s].get(FABRIC_FIELDS[f]) == kind]
            if same:
                pool, where = same, f"the other dies on {kind}"
        if f in RATES or f in SHARES:
            # a protocol's cap or share: 0 says NCCL does not run it there (or a fitted
            # in-node curve stands), nothing about its bandwidth where it runs
            pool = [x for x in pool if x > 0]
            where += " that run the protocol"
        if not pool and f in PROTOCOL_FIELDS:
            out[f] = 0.0
            rules[f] = "no die states it: NCCL's Simple protocol only (0)"
            continue
        if not pool:
            raise ValueError(f"efficiency {f}: no die measured it, so no rule can give it")
        out[f] = _mean(pool)
        rules[f] = f"mean of {len(pool)} measurement(s) on {where}"
        if f in TORUS_FIELDS and values.get("topology") == "torus":
            links = int(values.get("scale_up_links") or 2 * len(values.get("torus_dims") or (1,)))
            out[f] *= min(1.0, 2.0 / links)
            rules[f] += (f", times 2/{links}: a ring runs along one torus dimension at a time "
                         f"over its 2 links of the {links}")
    for f in RATIO_FIELDS:
        if f in own:
            continue
        ratios = [m[f] / m["tile_efficiency"] for m in others.values()
                  if f in m and "tile_efficiency" in m]
        if not ratios:
            raise ValueError(f"efficiency {f}: no die measured it beside tile_efficiency")
        out[f] = min(1.0, out["tile_efficiency"] * _mean(ratios))
        rules[f] = (f"tile_efficiency x mean ratio {f}/tile_efficiency of "
                    f"{len(ratios)} other die(s)")
    return out, {f: rules.get(f, "measured") for f in EFFICIENCY_DTYPE.names}


def measured_table(files: dict) -> dict:
    """silicon → {field: measured value, "__kinds__": {link_kind, net_kind}} from the checked
    fields of preset files (name → values): every preset of a die adds what it measured,
    the first in ``files`` order winning a field measured twice (and giving the kinds)."""
    table = {}
    for name, values in files.items():
        silicon = values.get("silicon") or name
        entry = table.setdefault(silicon, {"__kinds__": {k: values.get(k)
                                                         for k in ("link_kind", "net_kind")}})
        for k, v in (values.get("efficiency") or {}).items():
            entry.setdefault(k, v)
    return table

