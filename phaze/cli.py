"""Command-line interface: ``phaze search | evaluate | place | models | archs | plot``.

Thin layer on top of the public modules: parse, call, print. Errors in user
input are printed as one line on stderr with exit status 2.
"""
from __future__ import annotations

import argparse
import sys


def _cmd_models(args) -> int:
    from . import models

    rows = [models.get(n) for n in models.names()]
    print(f"{'name':<18} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} {'ffn':>6} "
          f"{'vocab':>6} {'seq':>5} {'act':<7} {'params':>16}")
    for m in rows:
        print(f"{m.name:<18} {m.n_layers:>6} {m.hidden:>6} {m.heads:>5} {m.kv_heads:>4} "
              f"{m.ffn_hidden:>6} {m.vocab:>6} {m.seq_len:>5} {m.activation:<7} {m.n_params:>16,}")
    return 0


def _cmd_archs(args) -> int:
    raise NotImplementedError("phaze archs arrives with phaze.arch")


def _cmd_place(args) -> int:
    raise NotImplementedError("phaze place arrives with phaze.placement")


def _cmd_search(args) -> int:
    raise NotImplementedError("phaze search arrives with phaze.search")


def _cmd_evaluate(args) -> int:
    raise NotImplementedError("phaze evaluate arrives with phaze.search")


def _cmd_plot(args) -> int:
    raise NotImplementedError("phaze plot arrives with phaze.search")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="phaze",
        description="Joint accelerator-architecture and device-placement search for LLM training.")
    parser.add_argument("--version", action="version", version=f"phaze {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("models", help="list the built-in model zoo")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("archs", help="list the architecture presets and the default space")
    p.set_defaults(func=_cmd_archs)

    p = sub.add_parser("place", help="solve a placement problem in the original study's JSON")
    p.add_argument("file", help="placement problem JSON")
    p.add_argument("-o", "--out", help="write the plan as JSON here")
    p.set_defaults(func=_cmd_place)

    p = sub.add_parser("search", help="joint architecture and placement search")
    p.set_defaults(func=_cmd_search)

    p = sub.add_parser("evaluate", help="evaluate one architecture and strategy")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("plot", help="plot throughput vs area from a result file")
    p.set_defaults(func=_cmd_plot)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"phaze {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"phaze {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
