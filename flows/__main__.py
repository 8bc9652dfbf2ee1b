"""``python -m flows`` is the ``flows`` command (``flows._entry``: Ctrl-C at any instant is one line
and status 130)."""

import sys

from flows._entry import main

sys.exit(main())
