"""phaze.cli — the ``phaze`` command.

The face re-exports; ``_main`` builds the parser and runs the sub-commands, ``_lists``
parses the comma lists of the search's knobs, ``_emit`` prints launch arguments.
"""
from ._main import OUTPUT_CONVENTIONS, SEARCH_LEGEND, build_parser, main

__all__ = ["main", "build_parser", "SEARCH_LEGEND", "OUTPUT_CONVENTIONS"]
