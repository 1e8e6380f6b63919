"""``python -m speed`` is the ``speed`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
