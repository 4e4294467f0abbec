"""``python -m tortoise_sdk.cli``: the same as the ``tortoise`` command."""

import sys

from . import main

__all__ = ()

sys.exit(main())
