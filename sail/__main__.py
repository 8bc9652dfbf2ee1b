"""``python -m sail`` is the ``sail`` command (``sail._entry``: Ctrl-C at any instant is one line
and status 130)."""

import sys

from sail._entry import main

sys.exit(main())
