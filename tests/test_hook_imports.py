"""``tortoise hook`` starts as a fresh process per Claude Code event: it imports only what capture and context need."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tortoise_sdk import Memory

SHORT = Path(__file__).resolve().parent / "data" / "claude_code_short.jsonl"
SHORT_SESSION = "55604662-cf2a-4331-851a-ec234028f8ca"
#: Imported by no step of a UserPromptSubmit on SQLite; each costs the fresh process tens of ms.
NOT_NEEDED = ("litellm", "networkx", "rich", "fastapi", "uvicorn", "psycopg", "asyncio", "tortoise_sdk.pipeline",
              "tortoise_sdk.async_memory")
#: Runs the hook as ``python -m tortoise_sdk.cli hook`` does, then writes the modules the process holds.
SCRIPT = """
import io, json, sys
sys.stdin = io.StringIO(sys.argv[3])
from tortoise_sdk.cli import main
code = main(["--db", sys.argv[1], "hook"])
json.dump({"code": code, "modules": sorted(sys.modules)}, open(sys.argv[2], "w"))
"""


def test_the_prompt_hook_imports_no_model_server_graph_or_asyncio_code(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with Memory(str(db)) as mem:
        mem.capture("earlier", [{"role": "user", "content": "the flaky parser test needs PYTHONHASHSEED=0 to pass"},
                                {"role": "assistant", "content": "Set PYTHONHASHSEED=0 in tox.ini for the parser"}])
    event = {"session_id": SHORT_SESSION, "transcript_path": str(SHORT), "cwd": str(tmp_path), "permission_mode": "default",
             "hook_event_name": "UserPromptSubmit", "prompt": "which PYTHONHASHSEED does the parser test need?"}
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(db), str(out), json.dumps(event)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "PYTHONHASHSEED=0" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    seen = json.loads(out.read_text())
    assert seen["code"] == 0
    loaded = [m for m in NOT_NEEDED if any(name == m or name.startswith(m + ".") for name in seen["modules"])]
    assert loaded == []
    with Memory(str(db)) as mem:
        assert SHORT_SESSION in [s.session_id for s in mem.sessions()]  # the transcript was captured too
