"""The host integrations stay optional: the core import and the CLI load neither the MCP SDK nor the Agents SDK."""

from __future__ import annotations

import subprocess
import sys


def test_core_import_and_cli_parser_load_no_host_sdk() -> None:
    code = (
        "import sys, tortoise_sdk; from tortoise_sdk.cli import build_parser; build_parser(); "
        "heavy = sorted(m for m in ('mcp', 'agents', 'openai', 'litellm') if m in sys.modules); "
        "print(heavy); sys.exit(bool(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
