"""What a newcomer runs first shows memory working: the custom-loop example and ``tortoise demo``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli as run

REPO = Path(__file__).resolve().parents[1]


def exchanges(output: str) -> dict[str, tuple[str, str]]:
    """``user text -> (block shown, assistant reply)`` from the example's printout."""
    found = re.findall(r"^user: (.*)\n((?:(?!assistant: ).*\n)*)assistant: (.*)$", output, re.M)
    return {user: (block, reply) for user, block, reply in found}


def test_the_custom_loop_example_answers_from_the_block_with_the_current_job(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "custom_loop.py"), "--db", str(tmp_path / "ex.db")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    talk = exchanges(proc.stdout)
    block, reply = talk["And where am I working these days?"]
    assert reply.startswith('On 2024-06-14 you told me: "') and "Helix Health" in reply
    quoted = reply.split('"', 1)[1].rstrip('"')
    assert f'Maya) "{quoted}"' in block  # the user's own words, from the block it was shown
    # The older job is there too, after the newer: the reply to "What are you working on there?".
    assert "data engineer on the protein folding team" in block
    assert block.index("Helix Health") < block.index("protein folding team")
    assert "Biscuit" in talk["Remind me, what is my dog called?"][1]
    assert talk["Hi!"][0].startswith("(no memory block")


@pytest.mark.block_network(allowed_hosts=["127.0.0.1"])  # the demo's recorded replies are served on loopback
def test_the_demos_first_search_hit_is_the_users_own_statement(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "--db", str(tmp_path / "demo.db"), "demo")
    assert code == 0
    # Extraction runs for real over loopback: both sessions give memories, the second updates the first's.
    assert out.count("extraction ok:") == 2 and "UPDATE" in out, out
    searches = re.findall(r"^search: (.*)\n((?:  .*\n)+)", out, re.M)
    assert [q for q, _ in searches] == ["where does Maya work now?", "what is the dog called"]
    first = searches[0][1].splitlines()[1]
    assert re.match(r"^\s+\d+\.\d\d  \[demo-2#0\] Maya: Big news: I left Northwind Labs\. I'm now at Helix Health", first)
    hits = [line for _, lines in searches for line in lines.splitlines() if re.match(r"^\s+\d+\.\d\d ", line)]
    assert hits and not [h for h in hits if re.match(r"^\s+0\.00 ", h)]  # no hit that matched nothing that counts
    # "He's a two-year-old beagle" never says "dog": the words miss it, the extracted memory names it.
    dog = searches[1][1].split("memories, extracted")[1].splitlines()[1]
    assert "Maya has a dog named Biscuit" in dog and "(demo-1)" in dog
