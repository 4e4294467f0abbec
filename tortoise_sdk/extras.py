"""The optional dependencies (the package's extras) and how a message asks a user to install one."""

from __future__ import annotations

__all__ = ("install_hint",)


def install_hint(extra: str) -> str:
    """The command that installs ``extra``, for a published package and for a clone (it is not on PyPI yet)."""
    return f"pip install 'tortoise-sdk[{extra}]' (from a clone of the repository: pip install -e '.[{extra}]')"
