"""A missing optional dependency names its extra, installable the way the README says (from a clone)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: module to import -> (a dependency it needs, the extra that brings it)
NEEDS = {
    "tortoise_sdk.store.postgres": ("psycopg", "postgres"),
    "tortoise_sdk.adapters.langchain": ("langchain", "langchain"),
    "tortoise_sdk.adapters.mcp_server": ("mcp", "mcp"),
    "tortoise_sdk.adapters.serve": ("fastapi", "server"),
    "tortoise_sdk.adapters.openai_agents": ("agents", "openai-agents"),
}


@pytest.mark.parametrize("module", NEEDS)
def test_a_missing_extra_says_how_to_install_it_from_a_clone(module):
    # The package is not on PyPI yet: "pip install 'tortoise-sdk[x]'" alone failed for a user of a clone.
    dependency, extra = NEEDS[module]
    code = f"""if True:
        import sys
        sys.modules[{dependency!r}] = None  # as if the extra were not installed
        try:
            import {module}
        except Exception as exc:
            print(exc)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"pip install 'tortoise-sdk[{extra}]'" in out and f"pip install -e '.[{extra}]'" in out, out
