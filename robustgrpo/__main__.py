"""``python -m robustgrpo``: see :mod:`robustgrpo.cli`."""

import sys

from robustgrpo.cli import main

sys.exit(main())
