"""The memory block in a coding agent's session (issue 23): the host's own turns, generic prompts, noise shapes.

Transcripts are written as Claude Code writes them (one JSON object per line) and handed to the
hook's code path (``adapters.claude_code.handle_event``), as ``tortoise hook`` does.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tortoise_sdk import Memory
from tortoise_sdk.adapters.claude_code import handle_event, slash_arguments


class Transcript:
    """A Claude Code transcript file that grows by the lines of one session."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.path, self.session_id, self.last = path, session_id, None
        path.write_text("", encoding="utf-8")

    def _add(self, obj: dict[str, Any]) -> str:
        u = str(uuid.uuid4())
        obj = {"parentUuid": self.last, "sessionId": self.session_id, "uuid": u,
               "timestamp": "2026-01-05T12:00:00.000Z", "cwd": "/repo", **obj}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(obj) + "\n")
        self.last = u
        return u

    def user(self, text: str, **extra: Any) -> str:
        return self._add({"type": "user", "message": {"role": "user", "content": text}, **extra})

    def assistant(self, text: str) -> str:
        return self._add({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text",
                                                                                              "text": text}]}})

    def tool(self, name: str, args: dict[str, Any], result: str) -> tuple[str, str]:
        tid = f"toolu_{uuid.uuid4().hex[:12]}"
        call = self._add({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": tid, "name": name, "input": args}]}})
        res = self._add({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": result}]}})
        return call, res


def prompt(mem: Memory, t: Transcript, text: str) -> str:
    """The block the hook gives ``text`` in ``t``'s session ("" when silent); the prompt then joins the transcript."""
    out = handle_event(mem, {"hook_event_name": "UserPromptSubmit", "session_id": t.session_id,
                             "transcript_path": str(t.path), "cwd": "/repo", "prompt": text})
    t.user(text)
    return out["hookSpecificOutput"]["additionalContext"] if out else ""


def stop(mem: Memory, t: Transcript) -> None:
    handle_event(mem, {"hook_event_name": "Stop", "session_id": t.session_id, "transcript_path": str(t.path),
                       "cwd": "/repo"})


def earlier_sessions(mem: Memory, tmp_path: Path) -> dict[str, str]:
    """Three earlier sessions of one project, each pushing and running the tests; one says how releases retry."""
    ids = {}
    for n in range(3):
        t = Transcript(tmp_path / f"s{n}.jsonl", f"s{n}")
        t.user(f"please refactor the parser module, part {n}")
        t.assistant("I'll refactor it and run the tests.")
        t.tool("Bash", {"command": "make test", "description": "Run the tests"}, "ok  all tests passed")
        t.tool("Bash", {"command": "git push origin HEAD", "description": "Push the branch"}, "pushed to origin")
        t.user("continue")
        t.assistant("Continuing: the tests pass and the branch is pushed.")
        if n == 1:
            ids["retry"] = t.tool("Edit", {"file_path": "/repo/.github/workflows/release.yml",
                                           "description": "Wrap goreleaser in nick-fields/retry"},
                                  "release.yml updated: goreleaser retried twice by nick-fields/retry")[0]
        stop(mem, t)
    return ids


def test_generic_prompts_stay_silent_and_a_specific_question_still_gets_its_evidence(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        ids = earlier_sessions(mem, tmp_path)
        for i, text in enumerate(["did you push?", "continue", "run the tests again", "check again",
                                  "push it to origin"]):
            fresh = Transcript(tmp_path / f"g{i}.jsonl", f"g{i}")
            assert prompt(mem, fresh, text) == "", text
        asking = Transcript(tmp_path / "q.jsonl", "q")
        block = prompt(mem, asking, "how do we retry the goreleaser release step?")
        assert ids["retry"] in json.dumps(_external_ids(mem, block))
        assert "specific:" in "".join(mem.context([{"role": "user", "content": "how do we retry the goreleaser "
                                                    "release step?"}], specific_only=True).why)


def test_a_slash_command_is_searched_by_its_arguments_only(tmp_path) -> None:
    # "/exit" matched every "Exit code 1" result; "/release-notes" the goreleaser turns: a command's name is no topic.
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        ids = earlier_sessions(mem, tmp_path)
        t = Transcript(tmp_path / "x.jsonl", "x")
        t.tool("Bash", {"command": "make lint", "description": "Lint"}, "Exit code 1: lint failed in parser.py")
        stop(mem, t)
        for i, text in enumerate(["/exit", "/lint", "  /release:notes  ", "/retry"]):
            assert prompt(mem, Transcript(tmp_path / f"c{i}.jsonl", f"c{i}"), text) == "", text
        block = prompt(mem, Transcript(tmp_path / "a.jsonl", "a"), "/ask how do we retry the goreleaser release step?")
        assert ids["retry"] in json.dumps(_external_ids(mem, block))
    assert slash_arguments("/usr/bin/env is missing") == "/usr/bin/env is missing"  # a path, not a command
    assert slash_arguments("see /init") == "see /init" and slash_arguments(None) is None


def _external_ids(mem: Memory, block: str) -> list[str | None]:
    import re

    return [mem.store.get_turn(mem.namespace, ref).external_id for ref in re.findall(r"\bref:(\S+)", block)]


def test_the_current_session_is_never_shown_until_compacted_then_its_compacted_part_is(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        t = Transcript(tmp_path / "now.jsonl", "now")
        said = t.user("the staging database password rotates through vault path secret/staging/pgbouncer")
        t.assistant("Noted.")
        for n in range(8):  # well past the hook's window of recent turns
            t.user(f"rename the widget number {n} in the dashboard")
            t.assistant(f"Renamed widget {n}.")
        ask = "which vault path rotates the staging pgbouncer password?"
        assert prompt(mem, t, ask) == ""  # Claude Code still holds the whole session
        t.user("This session is being continued from a previous conversation that ran out of context. The "
               "conversation is summarized below: renamed dashboard widgets.", isCompactSummary=True,
               isVisibleInTranscriptOnly=True)
        block = prompt(mem, t, ask + " remind me")
        assert said in json.dumps(_external_ids(mem, block))
        assert "compacted out of your context" in block.splitlines()[0]



def test_a_resumed_session_is_not_shown_what_it_resumed_until_it_compacts(tmp_path) -> None:
    """A user's: `claude --resume` starts a session whose transcript begins with the one it continues (copied under
    that one's id), all of it in Claude Code's context; its first prompt's block pointed three times into it, headed
    "this user's earlier sessions". Another session is still shown it, and the resumed one once it compacts."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        first = Transcript(tmp_path / "first.jsonl", "first")
        said = first.user("the staging database password rotates through vault path secret/staging/pgbouncer")
        first.assistant("Noted: vault path secret/staging/pgbouncer rotates the staging password.")
        stop(mem, first)
        resumed = Transcript(tmp_path / "resumed.jsonl", "resumed")
        resumed.path.write_bytes(first.path.read_bytes())  # the predecessor's lines, under their own session id
        resumed.last = first.last
        resumed.user("rename the dashboard widget")
        ask = "which vault path rotates the staging pgbouncer password?"
        assert prompt(mem, resumed, ask) == ""  # Claude Code holds the session it resumed
        stop(mem, resumed)
        assert prompt(mem, resumed, ask + " remind me") == ""  # and still does, at a later prompt
        block = prompt(mem, Transcript(tmp_path / "other.jsonl", "other"), ask)
        assert said in json.dumps(_external_ids(mem, block))  # another session is shown it
        resumed.user("This session is being continued from a previous conversation that ran out of context. The "
                     "conversation is summarized below: renamed dashboard widgets.", isCompactSummary=True,
                     isVisibleInTranscriptOnly=True)
        block = prompt(mem, resumed, ask + " again?")
        assert said in json.dumps(_external_ids(mem, block))  # compacted: no longer in the context
        mem.forget_session("first")
        assert "first" not in json.dumps(mem.cursor("claude-code:shown:resumed").value)
        bad = mem.context([{"role": "user", "content": ask}], held_sessions={"first": -1})
        assert (bad.degraded_reason or "").startswith("invalid_input: held_sessions")

def test_host_text_boilerplate_and_bare_replies_are_no_evidence(tmp_path) -> None:
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        t = Transcript(tmp_path / "a.jsonl", "a")
        t.user("please look at the flaky scheduler in cron_runner.py")
        reminder = t.tool("Read", {"file_path": "/repo/cron_runner.py"},
                          "1 import time\n<system-reminder>Whenever you read a file, consider whether the "
                          "quarantine sandbox escalation policy applies; remind the user about the todo list."
                          "</system-reminder>")[1]
        todo = t.tool("TodoWrite", {"todos": [{"content": "fix scheduler"}]},
                      "Todos have been modified successfully. Ensure that you continue to use the todo list to "
                      "track your progress. Please proceed with the current tasks if applicable")[1]
        t.assistant("Should I quarantine the sandbox escalation policy?")
        bare = t.user("yes")
        stop(mem, t)
        later = Transcript(tmp_path / "b.jsonl", "b")
        for text in ("what was the quarantine sandbox escalation policy?",
                     "remind me to keep using the todo list to track progress"):
            shown = _external_ids(mem, prompt(mem, later, text))
            assert reminder not in shown and todo not in shown and bare not in shown, text


def test_the_agents_own_plan_list_is_no_evidence(tmp_path) -> None:
    """Reviewer: `tool_use TodoWrite todos=(…)` was a pointer six times. The agent's plan list repeats what the
    prompt asked and says nothing it found; the turn that did the work is the evidence."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        t = Transcript(tmp_path / "a.jsonl", "a")
        t.user("the goreleaser notarize step fails on release, make it retry")
        plan = t.tool("TodoWrite", {"todos": [{"content": "Make the goreleaser notarize step retry on release",
                                                "status": "in_progress"}]},
                      "Todos have been modified successfully.")[0]
        work = t.tool("Edit", {"file_path": "/repo/.goreleaser.yaml", "description": "notarize retries 3 times"},
                      "The goreleaser notarize step now retries 3 times before the release fails")[0]
        stop(mem, t)
        shown = _external_ids(mem, prompt(mem, Transcript(tmp_path / "b.jsonl", "b"),
                                          "how does the goreleaser notarize step retry on release?"))
        assert work in shown and plan not in shown, shown


def test_the_memory_read_back_is_no_evidence(tmp_path) -> None:
    """Reviewer: the agent ran the `tortoise … expand ID` the block's hint names; the next session's block then
    pointed at that call and at what it printed (a copy of the pointer), and a search's output likewise."""
    import re
    import subprocess
    import sys

    db = str(tmp_path / "m.db")
    ask = "goreleaser fails with field retry not found, what was the fix?"
    with Memory(db, namespace="proj") as mem:
        first = Transcript(tmp_path / "a.jsonl", "a")
        first.user("goreleaser release fails: field retry not found in notarize")
        fix = first.tool("Edit", {"file_path": "/repo/.goreleaser.yaml", "description": "drop the retry field"},
                         "Removed retry from notarize in .goreleaser.yaml; the retry moved to nick-fields/retry")[0]
        stop(mem, first)
        second = Transcript(tmp_path / "b.jsonl", "b")
        block = prompt(mem, second, ask)
        ref = re.findall(r"\bref:(\S+)", block)[0]
        readback = []
        for args in (["expand", ref], ["search", "goreleaser retry"]):
            command = ["tortoise", "--db", db, "--namespace", "proj", *args]
            printed = subprocess.run([sys.executable, "-m", "tortoise_sdk.cli", *command[1:]], capture_output=True,
                                     text=True, check=True).stdout
            assert "retry" in printed
            readback += second.tool("Bash", {"command": " ".join(command), "description": "Read the memory"}, printed)
        printed_block = second.tool("Bash", {"command": "cat notes.txt"}, block + "\nend of notes")[1]
        stop(mem, second)
        shown = _external_ids(mem, prompt(mem, Transcript(tmp_path / "c.jsonl", "c"), ask))
        assert fix in shown and not set(readback + [printed_block]) & set(shown), shown


_POINTER = '1. (2026-02-01, user) "the kestrel pipeline uses the flamingo runner" ref:t_e0fef99321977fd808c2'


def _told_kestrel(mem: Memory, tmp_path: Path) -> str:
    """A first session where the user says which runner the kestrel pipeline uses; the id of that turn."""
    first = Transcript(tmp_path / "a.jsonl", "a")
    original = first.user("the kestrel pipeline uses the flamingo runner, the deploy job runs on it")
    first.assistant("Noted.")
    stop(mem, first)
    return original


@pytest.mark.parametrize("command", [
    "cd /home/u/proj && /home/u/.venv/bin/tortoise --db m.db --namespace proj expand t_e0fef99321977fd808c2",
    "uv run tortoise search 'kestrel flamingo runner'",
    "TORTOISE_DB=m.db tortoise expand t_e0fef99321977fd808c2 | head -3",
    "python -m tortoise_sdk expand t_e0fef99321977fd808c2",
    "cd /repo; python3 -m tortoise_sdk.cli search kestrel runner"])
def test_a_tortoise_call_anywhere_in_a_command_is_no_evidence(tmp_path, command) -> None:
    """Reviewer: only a `tortoise` right after `command=` was no evidence; `cd … && …/tortoise … expand`, `uv run
    tortoise search`, `TORTOISE_DB=… tortoise expand`, `python -m tortoise_sdk expand` went above the original."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        original = _told_kestrel(mem, tmp_path)
        second = Transcript(tmp_path / "b.jsonl", "b")
        second.user("let's look at the deploy job")
        call, _ = second.tool("Bash", {"command": command, "description": "kestrel pipeline flamingo runner memory"},
                              "ok")
        stop(mem, second)
        shown = _external_ids(mem, prompt(mem, Transcript(tmp_path / "c.jsonl", "c"),
                                          "which runner does the kestrel pipeline use?"))
        assert shown[:1] == [original] and call not in shown, shown


@pytest.mark.parametrize(("command", "call"), [
    ("tortoise expand t_1", True), ("sudo tortoise serve", True), ("echo $(tortoise context q)", True),
    ("uv run --with x tortoise search foo", True), ("uvx tortoise expand t_1", True), ("env A=1 tortoise search x", True),
    # the word as an argument or a path is no call
    ("cd tortoise-sdk && pytest -q", False), ("cd ~/src/tortoise && make test", False), ("grep -rn tortoise .", False),
    ("pip install tortoise-sdk", False), ("vim tortoise_sdk/reflex/noise.py", False), ("ls ~/code/tortoise", False)])
def test_only_a_call_of_tortoise_is_taken_out_of_a_tool_call(command, call) -> None:
    from tortoise_sdk.reflex.noise import evidence_text

    assert (not evidence_text(f"[tool_use Bash command={command} description=Run it]").strip()) is call


@pytest.mark.parametrize("quoted", [
    f"Per the memory block: {_POINTER} so the kestrel deploy job runs on flamingo.",
    _POINTER.replace("ref:", "ref ").replace('"', "'"),
    f"From memory:\n  {_POINTER}\n  2. (memory) \"kestrel pipeline runner is flamingo\" ref:m_0123456789abcdef0123",
    # a block quoted as markdown, and what the agent concludes from it right after
    f"> [Tortoise Memory] Retrieved...\n> {_POINTER}\n> [/tortoise memory]\nThe kestrel pipeline runner is flamingo."])
def test_a_pointer_line_quoted_without_its_header_is_no_evidence(tmp_path, quoted) -> None:
    """Reviewer: the agent quoted a block's pointer lines without the `[tortoise memory]` header (or a block, then
    said what it read), and the next session's block led with the quote, above the user's own turn."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        original = _told_kestrel(mem, tmp_path)
        second = Transcript(tmp_path / "b.jsonl", "b")
        second.user("what runs the kestrel deploy job?")
        quote = second.assistant(quoted)
        stop(mem, second)
        shown = _external_ids(mem, prompt(mem, Transcript(tmp_path / "c.jsonl", "c"),
                                          "which runner does the kestrel pipeline use?"))
        assert shown[:1] == [original] and quote not in shown, shown


def test_why_calls_specific_only_the_words_that_made_a_pointer_specific(tmp_path) -> None:
    """Reviewer: `why` listed every matched word as specific, 'test' (in most turns) beside the rare ones."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        for i in range(40):
            mem.capture(f"s{i}", [{"role": "user", "content": f"rerun test suite {i} in the ci job"}])
        mem.capture("fix", [{"role": "user", "content": "the fix for the failing flaky test was a retry"}])
        block = mem.context([{"role": "user", "content": "fix the failing test"}], specific_only=True,
                            time_budget_ms=None)
        why = block.why[0]
        specific, _, also = why.partition("specific: ")[2].partition("; also matched ")
        assert "'fix'" in specific and "'failing'" in specific and "'test'" not in specific, why
        assert also.startswith("'test' (in 41 of 41 turns), too common to count;"), why


def test_a_sub_agent_this_session_ran_is_not_shown_as_an_earlier_conversation(tmp_path) -> None:
    """Reviewer: three of three pointers came from ``<session>:agent-…``, captured minutes before in the same
    session, under "Retrieved from this user's earlier conversations". Claude Code holds what the sub-agent reported,
    not its own turns: they may be shown, and the header says whose they are."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        said = "the beads issue spotter-0rt tracks the credo igniter installer"
        mem.capture("old", [{"role": "user", "content": said}])
        mem.capture("now", [{"role": "user", "content": "plan the credo work"}])
        mem.capture("now:agent-a1", [{"role": "assistant", "content": "spotter-0rt: credo igniter installer, open"}])
        ask = [{"role": "user", "content": "what is spotter-0rt about, the credo igniter installer?"}]
        held = mem.context(ask, budget=5, session_id="now", held_from=0)
        assert {mem.store.get_turn(mem.namespace, p.id).session_id for p in held.pointers} == {"old", "now:agent-a1"}
        first = held.block.splitlines()[0]
        assert "the sub-agents this session ran" in first and "compacted" not in first
        # Another session never sees it (reviewer: a later session's block showed a sub-agent's chatter, and the
        # agent's prompt to it as "(user)", as this user's earlier conversation); nor does a call with no session.
        for session in ("later", None):
            other = mem.context(ask, budget=5, session_id=session, held_from=0 if session else None)
            assert {mem.store.get_turn(mem.namespace, p.id).session_id for p in other.pointers} == {"old"}
            assert "earlier conversations" in other.block.splitlines()[0]


def test_the_prompt_a_session_gave_its_sub_agent_is_neither_shown_nor_called_the_users(tmp_path) -> None:
    """Reviewer: in the session that ran it, a sub-agent's prompt (its "user" turn, written by the agent) was the
    block's first pointer, labelled "(user)", though the host holds it as the Task call's input; and the header said
    "earlier sessions" of a store that held none."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        mem.capture("now", [{"role": "user", "content": "audit the PR for file permission issues"}])
        mem.capture("now:agent-a1", [
            {"role": "user", "content": "Perform a security audit: file permission 0755 of hooks and settings files"},
            {"role": "assistant", "content": "Found: settings files are written 0644; hooks need 0755 permission"}])
        ask = [{"role": "user", "content": "did we check file permission 0755 for hooks and settings files?"}]
        block = mem.context(ask, budget=5, session_id="now", held_from=0)
        shown = [mem.store.get_turn(mem.namespace, p.id) for p in block.pointers]
        assert [(t.session_id, t.role) for t in shown] == [("now:agent-a1", "assistant")]
        assert block.block.splitlines()[0].startswith("[tortoise memory] Retrieved from the sub-agents this session ran")
        # A host that did not say what it holds may be shown the prompt, as the agent's, not the user's.
        loose = mem.context(ask, budget=5, session_id="now")
        assert '(undated, the agent, to a sub-agent) "Perform a security audit' in loose.block
        assert '(undated, user) "Perform' not in loose.block


def test_the_compacted_header_is_only_for_a_host_that_said_what_it_holds(tmp_path) -> None:
    """Reviewer: `/context` with a session id and no held_from pointed at that session's turns under "the part of
    this session compacted out of your context", though nothing said it was compacted."""
    with Memory(str(tmp_path / "m.db"), namespace="proj") as mem:
        mem.capture("h1", [{"role": "user", "content": "Clara lives in Porto by the river"},
                           {"role": "assistant", "content": "Porto is lovely"}])
        ask = [{"role": "user", "content": "where does Clara live?"}]
        block = mem.context(ask, session_id="h1")
        # Nor "this user's earlier conversations": a reviewer's host trimmed its history, and was told so of a turn of
        # the conversation under way.
        assert block.pointers and "from earlier turns of this session." in block.block.splitlines()[0]
        other = mem.context(ask, session_id="h2")
        assert "earlier conversations" in other.block.splitlines()[0]
        compacted = mem.context(ask, session_id="h1", held_from=5)  # the host holds h1 from turn 5 on
        assert "compacted out of your context" in compacted.block.splitlines()[0]


def test_what_a_person_writes_after_a_pasted_block_or_a_quoted_pointer_is_evidence() -> None:
    """A reviewer's second look: the rules for memory read back dropped a user's own correction ("That's outdated:
    ...") after a pasted block, and the rest of a line after a quoted pointer ("<- wrong, ...")."""
    from tortoise_sdk.reflex.noise import evidence_text

    pasted = (f"[tortoise memory] Retrieved...\n{_POINTER}\n[/tortoise memory]\n"
              "That's outdated: the kestrel pipeline moved to the heron runner")
    assert "heron runner" in evidence_text(pasted, "user") and "flamingo" not in evidence_text(pasted, "user")
    assert "heron runner" not in evidence_text(pasted, "assistant")  # the agent's copy of what it read
    assert "wrong, it is heron" in evidence_text(f"{_POINTER} <- wrong, it is heron now", "user")


@pytest.mark.parametrize("command", ['git commit -m "feat(tortoise): bound the window"',
                                     'grep -rnE "(tortoise|hare)" docs', 'git commit -m "save time tortoise sync"'])
def test_a_command_that_names_tortoise_as_an_argument_keeps_its_tool_call(command) -> None:
    from tortoise_sdk.reflex.noise import evidence_text

    assert evidence_text(f"[tool_use Bash command={command}]").strip()


def test_host_text_rules_take_time_in_proportion_to_a_turn_s_length() -> None:
    """A reviewer's: a hook-line rule compiled with DOTALL read to the end of the text from every line: a turn of
    paths under refs/ (which sent it through the rules) took 40 ms, "ref" beside 8,000 line breaks 0.93 s."""
    import time

    from tortoise_sdk.reflex.noise import evidence_text

    text = "prefer the refresh\n" + "\n".join(f"src/components/refresh/file{i}.ts" for i in range(20_000))
    started = time.perf_counter()
    evidence_text(text)
    assert time.perf_counter() - started < 2.0  # quadratic, this length took minutes
