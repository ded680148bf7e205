"""``python -m phaze``: the command line (``phaze.cli.main``).

Guarded, so that worker processes (which re-import the main module under spawn) do not
run the command again: the search then uses its process pool as the ``phaze`` script does.
"""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
