"""``python -m tandem``: the command line, where the ``tandem`` script is not installed (a GPU machine that
runs the checkout as it is)."""

from tandem.cli.app import main

main()
