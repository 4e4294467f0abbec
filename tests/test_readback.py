"""The ``tortoise`` command's JSON read back into a conversation is no evidence (``tortoise_sdk/readback.py``).

What ``memories``, ``search``, ``expand`` and ``context`` print with ``--json`` reached the transcript by a path the
other rules do not see (the person pasted it, the agent quoted it, a tool result printed it without a visible call
of ``tortoise``), and counted as evidence: the next block pointed at the copy, and extraction grounded a memory on
a memory. It is recognised by its shape, the keys the command prints first, and treated as a pasted block.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_coding_block import Transcript, _external_ids, prompt, stop
from test_grounding import hit, proposal

from tortoise_sdk import Memory
from tortoise_sdk.cli import main as cli_main
from tortoise_sdk.cli._common import emit_json
from tortoise_sdk.models import ExpandResult, MemoryBlock, MemoryRecord, Pointer, SearchHit, SearchResult, Source
from tortoise_sdk.pipeline.common import transcript_line
from tortoise_sdk.pipeline.grounding import evidence_turns, ground, is_evidence
from tortoise_sdk.reflex.noise import evidence_text
from tortoise_sdk.streams.claude_code import summarize_tool_result

SAID = "the kestrel pipeline uses the flamingo runner, the deploy job runs on it"
FACT = "The kestrel deploy job uses the flamingo runner"
ASK = "which runner does the kestrel pipeline use?"


@pytest.fixture(scope="module")
def cli_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What the command prints with --json, on a store that holds the kestrel fact as a turn and as a memory."""
    tmp = tmp_path_factory.mktemp("cli")
    db = str(tmp / "cli.db")
    with Memory(db, namespace="proj") as mem:
        mem.capture("a", [{"role": "user", "content": SAID}, {"role": "assistant", "content": "Noted."}])
        memory = mem.remember(FACT, about=["kestrel"])
        turn = mem.turns("a")[0].turn_id
    window = tmp / "window.json"
    window.write_text(json.dumps([{"role": "user", "content": ASK}]), encoding="utf-8")
    out = {}
    for name, argv in COMMANDS.items():
        argv = [turn if a == "TURN" else memory.id if a == "MEMORY" else str(window) if a == "WINDOW" else a
                for a in argv]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = cli_main(["--db", db, "--namespace", "proj", *argv, "--json"])
        assert code == 0 and "flamingo" in printed.getvalue(), (name, printed.getvalue())
        out[name] = printed.getvalue()
    return out


COMMANDS = {"memories": ["memories"], "search": ["search", "kestrel flamingo runner"], "expand turn": ["expand", "TURN"],
            "expand memory": ["expand", "MEMORY"], "context": ["context", "--window", "WINDOW", "--time-budget-ms", "0"]}


@pytest.mark.parametrize(("command", "who"), [
    (command, who) for command in COMMANDS for who in ("user", "assistant", "tool")
    # context's JSON in a tool result already ranked below the three pointers before the rule (its words are
    # no evidence since: the next test)
    if (command, who) != ("context", "tool")])
def test_the_commands_json_read_back_is_not_pointed_at(tmp_path: Path, cli_json: dict[str, str], command: str,
                                                       who: str) -> None:
    """Reviewer's case: the block pointed at a second session where the JSON was pasted, a copy of the first."""
    printed = cli_json[command]

    def paste(second: Transcript) -> str:
        if who == "user":
            return second.user(f"this is what I have on it:\n{printed}")
        if who == "assistant":
            return second.assistant(f"The memory says:\n{printed.rstrip()}\nSo the kestrel deploy job uses "
                                    "flamingo.")  # right after it: its copy, as after a block
        # a script that ran the command: its call is not in the transcript, only what it printed
        return second.tool("Bash", {"command": "./scripts/recall.sh deploy", "description": "Recall"},
                           f"recall: 1 answer\n{printed}")[1]

    _copy_is_not_pointed_at(tmp_path, paste)


def test_what_a_person_writes_around_the_json_is_evidence_and_grounds(cli_json: dict[str, str]) -> None:
    for name, doc in cli_json.items():
        pasted = f"I ran tortoise and got\n{doc}\nthat's outdated: the deploy job moved to the heron runner"
        said = evidence_text(pasted, "user")
        assert "heron runner" in said and "I ran tortoise and got" in said and "flamingo" not in said, name
        assert "flamingo" not in evidence_text(pasted, "assistant"), name
        turns = [hit(0, pasted), hit(1, doc), hit(2, f"  {doc}\n", role="assistant", name=None)]
        assert [is_evidence(t, None) for t in turns] == [True, False, False], name  # only the JSON: no evidence
        result = ground(proposal([
            {"content": "The deploy job moved to the heron runner.", "quote": "the deploy job moved to the heron "
             "runner", "turn": 0},
            {"content": "The kestrel deploy job uses flamingo.", "quote": FACT, "turn": 0},
        ]), evidence_turns(turns, {}))
        assert [g.item.content for g in result.points] == ["The deploy job moved to the heron runner."], name
        assert result.rejected == 1, name
        # Nor does an extraction stage read it as the conversation's.
        assert "flamingo" not in transcript_line(turns[0]) and "heron" in transcript_line(turns[0]), name


# -- the shape rule, as properties ------------------------------------------------------------------------

_HEX = st.text("0123456789abcdef", min_size=20, max_size=20)
#: Text a stored turn or memory may hold: quotes, braces, brackets, backslashes, markers, line breaks, any script.
_TEXT = st.text(st.one_of(st.sampled_from('{}[]"\\\n\t:,'), st.characters(codec="utf-8", exclude_categories=("Cs",))),
                max_size=60)
_WORD = st.from_regex(r"[a-z]{3,9}", fullmatch=True)


@st.composite
def documents(draw: st.DrawFn, single: bool = False) -> object:
    """A document as one of the commands prints it: a memory list, a search, an expanded turn or memory, a block,
    or one record of them (``single``: not the list)."""
    text = draw(_TEXT)
    mid, tid = f"m_{draw(_HEX)}", f"t_{draw(_HEX)}"
    source = Source(turn_id=tid, external_id=draw(st.none() | _TEXT), session_id=draw(_TEXT), quote=text)
    record = MemoryRecord(id=mid, kind=draw(st.sampled_from(["event", "point"])), content=text, session_id="s",
                          entities=[draw(_TEXT)], sources=[source])
    turn = SearchHit(turn_id=tid, external_id=None, session_id=draw(_TEXT), session_date=None, index=0,
                     role="user", name=draw(st.none() | _TEXT), content=text, score=1.5)
    pointer = Pointer(id=draw(st.sampled_from([mid, tid])), kind="memory", label="memory point", synopsis=text,
                      score=0.1)
    return draw(st.sampled_from([
        *([] if single else [[record, record.model_copy(update={"content": draw(_TEXT)})]]),
        SearchResult(query=draw(_TEXT), terms=[draw(_TEXT)], hits=[turn]),
        ExpandResult(id=draw(st.sampled_from([mid, tid])), kind="memory", content=text, supersession=[record],
                     sources=[source], surrounding=[turn]),
        MemoryBlock(block=f"[tortoise memory] x\n1. (memory) \"{text}\" ref:{mid}\n[/tortoise memory]",
                    pointers=[pointer], why=[draw(_TEXT)]),
        record, turn, source]))


def printed(doc: object, compact: bool) -> str:
    """The document as ``emit_json`` prints it (as the command does), or compacted as ``jq -c`` would."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        emit_json(doc)
    return json.dumps(json.loads(out.getvalue()), ensure_ascii=False) if compact else out.getvalue()


#: JSON of other shapes (a tool's output, a config file), of plain words and numbers, keys the command's among them.
_OTHER_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _WORD | st.sampled_from(["m_0123456789abcdef0123", "t_0a1b2c3d4e5f"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        _WORD | st.sampled_from(["id", "kind", "turn_id", "external_id", "query", "terms", "block", "pointers"]),
        inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.booleans(), _OTHER_JSON, st.lists(_WORD, min_size=1, max_size=4),
       st.lists(_WORD, max_size=4), st.sampled_from(["user", "assistant", None]))
def test_the_commands_json_is_cut_whole_and_only_it(doc: object, compact: bool, other: object, before: list[str],
                                                    after: list[str], role: str | None) -> None:
    """Whatever the stored text holds, the command's JSON goes whole, and the words and other JSON around it stay:
    after it, a person's (a blank line apart, the agent's too; right after it, the agent's words are its copy, as
    after a block it printed)."""
    assume(not commands_shape(other))
    text = printed(doc, compact).rstrip()
    theirs = json.dumps(other, indent=2 if compact else None)
    said = evidence_text(f"{theirs}\n{' '.join(before)}:\n{text}\n{' '.join(after)}", role)
    assert words(said) == [*words(theirs), *before, *([] if role == "assistant" else after)], (text, said)
    apart = evidence_text(f"{text}\n\n{' '.join(after)}", role)
    assert words(apart) == after, (text, apart)


def commands_shape(doc: object) -> bool:
    """Whether ``doc`` holds an object of the command's shape (the module docstring's rule, said again)."""
    if isinstance(doc, list):
        return any(commands_shape(d) for d in doc)
    if not isinstance(doc, dict):
        return False
    keys = list(doc)[:2]
    tortoise_id = re.compile(r"[tm]_[0-9a-f]{6,}")
    return (keys == ["id", "kind"] and isinstance(doc["id"], str) and tortoise_id.fullmatch(doc["id"]) is not None
            or keys == ["turn_id", "external_id"] and isinstance(doc["turn_id"], str)
            and re.fullmatch(r"t_[0-9a-f]{6,}", doc["turn_id"]) is not None
            or keys == ["query", "terms"] and isinstance(doc["query"], str) and isinstance(doc["terms"], list)
            or keys == ["block", "pointers"] and isinstance(doc["block"], str) and isinstance(doc["pointers"], list)
            or any(commands_shape(v) for v in doc.values()))


def words(text: str) -> list[str]:
    """The words evidence is made of (brackets and commas between the records of a list are none)."""
    return re.findall(r"\w+", text)


@settings(max_examples=200, deadline=None)
@given(documents(single=True), st.booleans(), st.integers(min_value=0), st.lists(_WORD, min_size=1, max_size=3))
def test_json_cut_short_is_cut_to_the_end_like_a_block_without_its_end_line(doc: object, compact: bool, cut: int,
                                                                          before: list[str]) -> None:
    """``tortoise memories --json | head``, a paste cut short: from its opening keys on, nothing of it is evidence."""
    text = printed(doc, compact).rstrip()
    second = {"id": "kind", "turn_id": "external_id", "query": "terms", "block": "pointers"}[next(iter(json.loads(text)))]
    opened = text.index(":", text.index(f'"{second}"')) + 1  # its first two keys, as the command prints them
    if second in ("terms", "pointers"):
        opened = text.index("[", opened) + 1  # and the list the second opens
    head = text[: opened + cut % (len(text) - opened)]  # past its opening keys, short of its last brace
    assert words(evidence_text(f"{' '.join(before)} {head}", "user")) == before, head


# -- as a coding host stores a tool result: its first 300 characters, whitespace collapsed ---------------------------


def test_contexts_json_in_a_tool_result_is_cut_though_stored_cut_inside_its_block(
        tmp_path: Path, cli_json: dict[str, str]) -> None:
    """A script that ran ``tortoise context --json``: Claude Code's transcript keeps the tool result's first 300
    characters, which end inside the ``block`` string (its header alone is half of them), before ``"pointers": [``.
    The shape rule never saw it: the rest of the block after the first pointer's ref was evidence, and the next
    session's block pointed at the copy."""
    printed = cli_json["context"]
    stored = summarize_tool_result({"content": printed}, "Read")
    assert '"pointers"' not in stored and "kestrel" in stored  # cut inside the block, as stored
    assert not re.findall(r"kestrel|flamingo|pipelin|undated", evidence_text(stored, "tool")), stored
    _read_from_a_file_is_not_pointed_at(tmp_path, printed)


def _read_from_a_file_is_not_pointed_at(tmp_path: Path, read: str) -> None:
    """The command's output written to a file by a script and read with the Read tool (``read``: what the tool
    returned) is not pointed at (``_copy_is_not_pointed_at``)."""

    def read_file(second: Transcript) -> str:
        second.tool("Bash", {"command": "./scripts/recall.sh deploy > /tmp/recall.json", "description": "Recall"}, "")
        return second.tool("Read", {"file_path": "/tmp/recall.json"}, read)[1]

    _copy_is_not_pointed_at(tmp_path, read_file)


def _copy_is_not_pointed_at(tmp_path: Path, write_copy: Callable[[Transcript], str]) -> None:
    """A session stores the fact; the next one holds a copy of the command's output (``write_copy`` writes it and
    returns its line's id); a third asks: its block leads with the fact and never points at the copy."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        first = Transcript(tmp_path / "a.jsonl", "a")
        original = first.user(SAID)
        first.assistant("Noted.")
        stop(mem, first)
        second = Transcript(tmp_path / "b.jsonl", "b")
        second.user("let's look at the deploy job")
        copy = write_copy(second)
        stop(mem, second)
        shown = _external_ids(mem, prompt(mem, Transcript(tmp_path / "c.jsonl", "c"), ASK))
        assert shown[:1] == [original] and copy not in shown, shown


def _read_tool(printed: str) -> str:
    """A file as Claude Code's Read tool returns it: each line after its number and an arrow."""
    return "\n".join(f"{n:>6}→{line}" for n, line in enumerate(printed.rstrip("\n").split("\n"), 1))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_commands_json_read_from_a_file_is_not_pointed_at(tmp_path: Path, cli_json: dict[str, str],
                                                              command: str) -> None:
    """``tortoise memories --json > recall.json`` then the Read tool on it: Claude Code numbers the file's lines
    (``     3→    "id": "m_…",``), so a line number stood between ``{`` and ``"id"`` and the shape rule never
    matched: its words were evidence, and the next session's block pointed at the file's copy (memories, search,
    expand)."""
    stored = summarize_tool_result({"content": _read_tool(cli_json[command])}, "Read")
    assert not re.findall(r"kestrel|flamingo|runner", evidence_text(stored, "tool")), stored
    _read_from_a_file_is_not_pointed_at(tmp_path, _read_tool(cli_json[command]))
