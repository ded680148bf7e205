"""``phaze search --from-meta FILE``: re-run the search a result file recorded (issue 29
item 9; ``phaze.search.read_meta`` / ``replay`` turn its metadata back into the search's
models and keywords). Part of the command line (``phaze.cli``)."""
from __future__ import annotations

from . import _emit

#: search options --from-meta takes beside it (the rest come from the recorded run).
_FROM_META_OK = ("from_meta", "out", "force", "emit", "serial", "workers", "address",
                 "progress", "resume")


def search_from_meta(args, defaults, fixed_system_summary) -> int:
    """``phaze search --from-meta FILE``: the recorded run again (``phaze.search.replay``);
    ``defaults``: the search options as parsed when none is given (any other value is
    refused by name); ``fixed_system_summary``: the ``--arch`` summary's formatter."""
    from .. import search
    given = [a for a in vars(args) if a not in _FROM_META_OK + ("argv", "func", "command")
             and getattr(args, a) != getattr(defaults, a, None) and a != "model"]
    if args.model or given:
        flag = "--model" if args.model else "--" + given[0].replace("_", "-")
        raise ValueError(f"--from-meta re-runs the recorded search: drop {flag} (only --out, "
                         f"--force, --emit and the worker options go with it)")
    meta = search.read_meta(args.from_meta)
    specs, kw = search.replay(meta)
    result = search.search(specs, out=args.out, resume=args.resume, force=args.force,
                           executor="serial" if args.serial else None, workers=args.workers,
                           address=args.address, progress=args.progress,
                           provenance=dict(command=getattr(args, "argv", None),
                                           from_meta=str(args.from_meta),
                                           config_paths=meta["metadata"]["run"].get(
                                               "config_paths"),
                                           space_every=meta["metadata"]["run"].get(
                                               "space_every")), **kw)
    print(fixed_system_summary(result) if "arch" in kw else result.format_summary())
    if args.out:
        print(f"results: {args.out}")
    if args.emit:
        args.seq_len = None
        return _emit.emit_best_plans(args, result, specs)
    return 0
