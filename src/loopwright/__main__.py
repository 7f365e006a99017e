"""``python -m loopwright``: the same command as the ``loopwright`` script, for an environment
whose scripts directory is not on PATH."""

import sys

from loopwright.cli import main

if __name__ == "__main__":
    sys.exit(main())
