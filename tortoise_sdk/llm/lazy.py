"""litellm, imported on first use (after pinning its offline cost map), once for every thread.

The only place the SDK imports litellm: importing the SDK stays cheap and offline.
"""

from __future__ import annotations

import threading
from types import ModuleType

from tortoise_sdk.config import ensure_litellm_env

__all__ = ("load_litellm",)

_litellm_module: ModuleType | None = None
_litellm_lock = threading.Lock()


def load_litellm() -> ModuleType:
    """Import litellm on first use, after pinning its offline cost map."""
    global _litellm_module
    if _litellm_module is None:
        with _litellm_lock:
            if _litellm_module is None:
                ensure_litellm_env()
                import litellm

                # Its "Give Feedback / Get Help" banners go to stdout on every error.
                litellm.suppress_debug_info = True
                _litellm_module = litellm
    return _litellm_module
