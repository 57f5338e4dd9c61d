"""``python -m zagg``: the command line of :mod:`zagg.cli`."""

import sys

from zagg.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
