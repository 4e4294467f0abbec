"""What some tests need from outside the repository, and what happens when it is missing.

Two things a fresh clone lacks: a PostgreSQL server (see ``pgtemp``) and the data set beside
the checkout, ``../shared/data`` (real Claude Code transcripts, MIT; LoCoMo, CC BY-NC 4.0, read
at test time only). A test that needs either skips with one reason when it is missing, except
under ``CI=true``, where it fails: CI must never silently drop half of the suite.

``TORTOISE_TEST_SHARED_DATA`` points the tests at another copy of the data (``tests/test_suite_skips.py``
points it at a missing directory to check the skipping).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ("LOCOMO_DIR", "SHARED_DATA", "TRANSCRIPTS", "in_ci", "needs_locomo", "needs_transcripts",
           "require_shared", "skip_or_fail")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TORTOISE_TEST_SHARED_DATA") or REPO.parent / "shared" / "data")
TRANSCRIPTS = SHARED_DATA / "claude-transcripts"
LOCOMO_DIR = SHARED_DATA / "locomo"

#: Marks a test reading ``../shared/data/<name>``; ``conftest.pytest_runtest_setup`` skips or fails it when absent.
needs_transcripts = pytest.mark.shared_data("claude-transcripts")
needs_locomo = pytest.mark.shared_data("locomo")


def in_ci() -> bool:
    """``CI`` is set to a true value: missing services and data fail the run instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_or_fail(reason: str) -> None:
    """Skip the running test with ``reason`` (one line), or fail it under ``CI=true``."""
    reason = " ".join(reason.split())
    if in_ci():
        pytest.fail(f"CI=true, so this cannot be skipped: {reason}", pytrace=False)
    pytest.skip(reason)


def require_shared(name: str) -> None:
    """Skip (or fail in CI) unless ``../shared/data/<name>`` is present."""
    if not (SHARED_DATA / name).is_dir():
        skip_or_fail(f"needs ../shared/data/{name} (not part of a clone; CI has it): not found at {SHARED_DATA / name}")
