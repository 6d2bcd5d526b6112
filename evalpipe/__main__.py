"""`python -m evalpipe` runs the command line, so tests and jobs need no console script on PATH."""

from evalpipe.cli import entry

entry()
