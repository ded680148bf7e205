"""A chip it has never seen (issue 26, item 4): predict the rows of a measured die with the
efficiency parameters the stated rules (``phaze.arch.rules``) give it when its own
measurements are held out, beside the prediction with its measured parameters.

    python3 bench/bench_rules.py [--die GH100]

For every preset made of the die (``silicon``), the held-out set is ``rules.derive`` of the
preset's file without its ``efficiency`` object and of the measurement table without the
die's entry: nothing measured on the die enters. Every ``phaze validate`` row on those
presets is then priced twice. Prints one line per row (measured-parameter error, rule-
derived error) and the MAPE of each; checks that the held-out sets differ from the measured
ones and that no held-out value equals a value measured only on the held-out die.
"""
from __future__ import annotations

import argparse
import sys

from phaze import validate
from phaze.arch import _catalog, rules
from phaze.arch.efficiency import Efficiency


def held_out_sets(die: str) -> dict:
    """preset name → the rule-derived Efficiency of each preset of ``die``, its die held out."""
    measured = {s: m for s, m in _catalog.MEASURED.items() if s != die}
    out = {}
    for name, values in _catalog.FILES.items():
        if (values.get("silicon") or name) != die:
            continue
        bare = {k: v for k, v in values.items() if k != "efficiency"}
        derived, _ = rules.derive(bare, measured)
        out[name] = Efficiency(**derived)
    return out


def _mape(errors):
    return sum(abs(e) for e in errors) / len(errors) if errors else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--die", default="GH100", help="the silicon to hold out (default GH100)")
    args = ap.parse_args(argv)
    sets = held_out_sets(args.die)
    if not sets:
        print(f"no preset is made of {args.die!r}", file=sys.stderr)
        return 2
    own = validate.run(None)
    held = validate.run(None, efficiency=sets)
    pairs = [(a, b) for a, b in zip(own.rows, held.rows)
             if a["config"]["arch"] in sets and a["kind"] == "time" and a["error"] is not None]
    assert all(a["name"] == b["name"] for a, b in pairs)
    width = max(len(a["name"]) for a, _ in pairs)
    print(f"die {args.die} held out: presets {', '.join(sets)}; {len(pairs)} modelled time rows")
    for name, eff in sets.items():
        mine = Efficiency(**_catalog.EFFICIENCY[name])
        diff = [f for f in Efficiency.__dataclass_fields__ if getattr(eff, f) != getattr(mine, f)]
        print(f"  {name}: rule-derived set differs from the measured one in {len(diff)} fields: "
              + ", ".join(f"{f} {getattr(mine, f):.4g}->{getattr(eff, f):.4g}" for f in diff))
    print(f"{'row':<{width}}  {'published':>9}  {'measured-params':>15}  {'rule-derived':>12}")
    for a, b in pairs:
        print(f"{a['name']:<{width}}  {a['published_s']:>8.3f}s  {a['error']:>+14.1f}%  "
              f"{b['error']:>+11.1f}%")
    ea, eb = [a["error"] for a, _ in pairs], [b["error"] for _, b in pairs]
    print(f"MAPE: measured parameters {_mape(ea):.1f} % (max {max(map(abs, ea)):.1f} %), "
          f"rule-derived {_mape(eb):.1f} % (max {max(map(abs, eb)):.1f} %); signed mean "
          f"{sum(ea) / len(ea):+.1f} % vs {sum(eb) / len(eb):+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
