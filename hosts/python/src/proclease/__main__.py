"""`python -m proclease`: the `proclease` command line (`proclease.cli`), for an environment
whose scripts directory is not on PATH."""

from .cli import entry

entry()
