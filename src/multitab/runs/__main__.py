"""`python -m multitab.runs` (multitab.runs.cli)."""

import sys

from multitab.runs.cli import main

raise SystemExit(main(sys.argv[1:]))
