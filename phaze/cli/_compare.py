"""``phaze search --arch a,b,c``: several chips compared for the same models (issue 26,
item 5): each chip's fixed-system search, then the chips ranked per model."""
from __future__ import annotations

import os
import time

from .. import plan as _plan


def arch_list(text) -> list:
    """The chips of ``--arch``: one name or file, or several separated by commas (a file
    whose name holds a comma is taken whole)."""
    if text is None:
        return []
    if "," not in text or os.path.exists(text):
        return [text]
    parts = [t.strip() for t in text.split(",")]
    if any(not t for t in parts):
        raise ValueError(f"--arch {text!r}: an empty chip name between commas; give NAME|FILE "
                         f"separated by commas")
    if len(set(parts)) != len(parts):
        raise ValueError(f"--arch {text!r} names a chip twice")
    return parts


def compare_chips(args, chips, model_list, common) -> int:
    """``phaze search --arch a,b,c``: each chip's fixed-system search in turn (``common``:
    the keywords ``phaze search`` gives every search), then per model the chips ranked by
    their best plan's samples/s (a chip that cannot run the datatype, or has no feasible
    plan, is listed last with the reason)."""
    from .. import search
    from ..search import knob_text

    if args.out or args.resume or args.emit:
        raise ValueError("--out, --resume and --emit take one chip; compare chips without "
                         "them, then search the chosen chip with --arch NAME")
    results, refused = {}, {}
    t0 = time.perf_counter()
    for name in chips:
        try:
            results[name] = search.search(model_list, arch=name, baselines=False, **common)
        except ValueError as exc:   # e.g. a datatype the chip has no tensor cores for
            refused[name] = str(exc).splitlines()[0]
    elapsed = time.perf_counter() - t0
    inp = next(iter(results.values())).metadata.get("inputs", {}) if results else {}
    names = [getattr(m, "name", m) for m in model_list]
    lines = [f"phaze search: {', '.join(names)} on {args.devices} devices, "
             f"{len(chips)} chips compared in {elapsed:.1f} s (each chip's best plan, ranked by "
             f"samples/s); global batch {inp.get('global_batch', args.global_batch)}"]
    for mname in names:
        rows, bad = [], []
        for name in chips:
            if name in refused:
                bad.append((name, refused[name]))
                continue
            r = (results[name].best.get("plans") or {}).get(mname)
            if r is None or not r.get("feasible"):
                bad.append((name, (r or {}).get("reason") or "no feasible plan"))
            else:
                rows.append((name, r))
        rows.sort(key=lambda nr: -nr[1]["samples_per_s"])
        lines.append(f"{mname}:")
        lines.append(f"{'rank':>4} {'chip':<12} {'samples/s':>11} {'tokens/s':>13} {'vs best':>8} "
                     f"{'t':>3} {'p':>4} {'d':>5} {'mb':>3} {_plan.summary_header()}")
        top = rows[0][1]["samples_per_s"] if rows else None
        for i, (name, r) in enumerate(rows, 1):
            lines.append(f"{i:>4} {name:<12} {r['samples_per_s']:>11,.1f} "
                         f"{r['tokens_per_s']:>13,.0f} {r['samples_per_s'] / top:>8.3f} "
                         f"{r['tensor_parallel']:>3} {r['pipeline_parallel']:>4} "
                         f"{r['data_parallel']:>5} {r['microbatch']:>3} {knob_text(r)}")
        for name, why in bad:
            lines.append(f"{'-':>4} {name:<12} not ranked: {why}")
    print("\n".join(lines))
    return 0
