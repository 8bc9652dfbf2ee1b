"""``python -m sail``: the sail command line."""

import sys

from sail._cli import main

sys.exit(main())
