"""``python -m flows`` is the ``flows`` command."""

import sys

from flows._cli import main

sys.exit(main())
