"""``python -m hostpool_operator.broker``."""

import sys

from .program import main

sys.exit(main())
