"""``python -m robustgrpo``: see :mod:`robustgrpo.cli`."""

import sys

from .cli import main

sys.exit(main())
