"""Turn shapes of coding streams that are not evidence: text the host or a hook wrote, and slash-command wrappers.

Measured on the Claude Code projects of ``benchmarks/bench_coding_memory.py``: tool calls (a
command with its description, a file path) and tool results hold about half of the answers, so
a tool turn is evidence. What is not: ``<system-reminder>`` blocks Claude Code appends to tool
results and prompts (they match words such as "remind", "todo", "file"), hook output echoed into
a prompt, the ``<command-name>`` wrapper of a slash command (the same template each time), the
TodoWrite tool's result (one boilerplate sentence, matching "continue", "todo", "proceed") and its
call (the agent's plan list: it restates what the prompt asked and says nothing found; in the coding
benchmark three such pointers went and no answer with them), and
the memory read back (a ``[tortoise memory]`` block and what the agent says right after it in the same
paragraph, a line with a block's pointer syntax quoted without the header, a call of ``tortoise expand``,
``search`` or any other command of this package anywhere in a shell command, what ``expand`` or
``search`` printed, and the JSON that ``memories``, ``search``, ``expand`` or ``context`` print with ``--json``
wherever it stands (pasted by the person, quoted by the agent, in a tool result whose command is not
seen: ``readback.without_cli_json``), treated as a pasted block is: the agent following the block's hint
would otherwise make the next session's block quote this one's), and
a turn of fewer than ``MIN_WORDS`` words ("yes", "3", "option 3": a reply that points at its
context, which the block cannot carry). Matches inside such text do not count; a turn made only
of it never counts.

In any conversation, an assistant's filler ("OK.", "Sure, happy to help!", "Got it.", "Hello! How
can I help you today?") states nothing: it is never evidence (``is_filler``), neither as a candidate,
nor as the reply an asking turn brings, nor as a neighbour lending its match (a greeting that
matched "help" or "today" lent it to whatever the person said next). Nor is its non-answer ("Sorry, I don't know.", "I'm not sure."), and the question it
failed to answer is not evidence of that answer either (``unanswered``): asked again, the question
would otherwise outrank the turn that said the fact, since it repeats the question's words. A
person's short reply ("Yes.", "Thanks!") is left alone: it may answer its question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..models import SearchHit
from ..readback import REST_OF_PARAGRAPH, without_cli_json
from ..search import STOP_WORDS, tokenize
from ..text import per_text
from .shapes import Candidate, Reading

__all__ = ("MIN_WORDS", "WH_WORDS", "cleaned_matches", "evidence_text", "is_dump", "is_echo", "is_filler",
           "is_non_answer", "is_noise", "unanswered")

#: Words a turn must say (outside host text) to be evidence on its own.
MIN_WORDS = 3
#: Tools whose results dump a file or a search: evidence of what a file holds, but they match many words by chance.
DUMP_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "WebFetch"})
#: Tools whose results are the same boilerplate every time.
BOILERPLATE_TOOLS = frozenset({"TodoWrite"})
_WORD = re.compile(r"\w+")
#: A TodoWrite call, as transcript ingestion stores a tool call: the agent's own plan list.
_PLAN_CALL = re.compile(r"\s*\[tool_use TodoWrite\b")
#: Words of an acknowledgement or a stock greeting ("How can I help you today?", "Thanks for telling me."), beside
#: the stop words: an assistant turn of only these states nothing.
FILLER_WORDS = frozenset("""
    hello sure thanks thank noted alright right fine great good cool understood certainly absolutely course done
    sounds perfect nice glad happy help welcome problem np hmm mm hm ah see gotcha roger will thing
    please let know anything else definitely indeed agreed alrighty yup yep k kk
    today assist assistance morning afternoon evening telling sharing letting
    """.split())
#: Words of a non-answer ("Sorry, I don't know."): filler too, and the question before it goes unanswered.
NON_ANSWER_WORDS = frozenset("sorry afraid unfortunately unsure idea remember recall".split())
#: A non-answer says one of these (beside its other words, all filler): "I'm not sure" is not "Sure!".
_DENIAL = frozenset("""
    not no don't dont can't cant cannot couldn't wouldn't didn't isn't haven't sorry afraid unfortunately unsure
    """.split())
#: Longer than this many words, an assistant turn is not filler whatever its words.
FILLER_MAX_WORDS = 12
#: A turn longer than this is never an echo (``is_echo``): it is not read word by word.
ECHO_MAX_CHARS = 200
#: A turn with one of these in its first words asks ("so what are your cats called"); one with a negation
#: (these, or a word ending in n't) says no: neither is an echo.
WH_WORDS = frozenset("what which who whom whose where when why how".split())
_NEGATION = frozenset("not no never nor none nothing nobody cannot".split())

#: A call of this package's CLI anywhere in a shell command: ``tortoise`` (from any path) where a command starts
#: (after ``command=``, ``&&``, ``;``, ``|``, ``$(``..., a ``VAR=value``, ``sudo``/``env``/``time``, or a runner:
#: ``uv run``, ``uvx``, ``pipx run``...), as in ``cd /p && /venv/bin/tortoise … expand``, ``TORTOISE_DB=m.db tortoise
#: search …``; or ``python -m tortoise_sdk``. Not an argument: ``cd ~/src/tortoise``, ``grep -rn tortoise .``.
_TORTOISE_CALL = (r"(?:command=|&&|\|\|?|;|`|\$\(|\b(?:then|exec|sudo|env|nohup|xargs)\s)\s*"
                  r"(?:[A-Za-z_]\w*=\S*\s+)*"
                  r"(?:(?:uv|pipx|poetry|hatch|pdm|rye)\s+run\s+(?:--?[\w-]+(?:[= ][^\s-]\S*)?\s+)*|uvx\s+)?"
                  r"(?:[^\s;&|()`'\"]*/)?tortoise(?=[\s;&|)`]|\Z)"
                  r"|\bpython[\d.]*\s+-m\s+tortoise_sdk\b")
#: A line with a block's pointer syntax (``1. (2026-02-01, user) "…" ref:t_…``, quoted without the block's header,
#: as prose or with ``ref t_…``): up to its ref the line is a copy of a memory; what follows it is said ("<- wrong").
_POINTER_LINE = r"^[^\n]{0,2000}?\bref(?::\s*|\s+)[tm]_[0-9a-f]{6,}"

_HOST_TEXT = re.compile(
    r"<system-reminder>.*?(?:</system-reminder>|\Z)"
    # The memory read back: a block the agent printed (or a pointer line of one), a call of this package's CLI, and
    # what ``expand`` or ``search`` printed for it (a turn or memory id then its status, or expand's JSON; a score
    # then a session#index).
    r"|(?i:\[tortoise memory\].*?(?:\[/tortoise memory\]|\Z))"
    rf"|{_POINTER_LINE}"
    rf"|\[tool_use \w+ (?=command=)(?=[^\n]{{0,400}}?(?:{_TORTOISE_CALL}))[^\n]*"
    r"|\A\[tool_result [^\]]*\] (?:(?:turn|memory) [tm]_[0-9a-f]+ \[\w+\]|\s*-?\d+\.\d{3}\s+\[[^\]]*#\d+|"
    r"\{\s*\"id\":\s*\"[tm]_[0-9a-f]+\").*"
    r"|<(command-name|command-message|command-args|local-command-stdout|local-command-stderr|"
    r"user-prompt-submit-hook)>.*?(?:</\1>|\Z)"
    r"|^[^\n]*\bhook (?:error|blocking error|feedback)\b[^\n]*$"
    r"|^Operation stopped by hook:[^\n]*$",
    re.S | re.M)


#: What the agent says right after quoting a block, to the end of that paragraph: its copy of the memory too. Only the
#: agent's: a person who pastes a block and corrects it on the next line ("That's outdated: …") said something new.
_AFTER_BLOCK = re.compile(r"(?i:\[/tortoise memory\])" + REST_OF_PARAGRAPH)
#: A cheap test that a text may hold a pointer (``ref:t_…``, ``ref m_…``) before the full rules run.
_MAY_POINT = re.compile(r"\bref(?::|\s+[tm]_)")


def evidence_text(text: str, role: str | None = None) -> str:
    """A turn's text without what the host, a hook or a slash-command wrapper wrote into it, nor the memory read
    back (a block, the ``tortoise`` command's JSON; in an assistant's turn, what it says right after either)."""
    text = without_cli_json(text, paragraph=role == "assistant")
    if role == "assistant" and "tortoise memory]" in text.lower():
        text = _AFTER_BLOCK.sub(" [/tortoise memory] ", text)
    return (_HOST_TEXT.sub(" ", text) if "<" in text or "hook" in text or "tortoise" in text
            or text[:1] == "[" or _MAY_POINT.search(text) else text)


def is_dump(c: Candidate) -> bool:
    """A tool result that dumps a file or a search (``DUMP_TOOLS``)."""
    h = c.hit
    return bool(h is not None and h.role == "tool" and h.name and set(h.name.split(",")) <= DUMP_TOOLS)


def is_filler(hit: SearchHit | None) -> bool:
    """An assistant turn that states nothing: a few words, all stop words or acknowledgement
    (``FILLER_WORDS``), or a non-answer (``is_non_answer``)."""
    words = _short_reply(hit)
    return words is not None and (all(w in STOP_WORDS or w in FILLER_WORDS for w in words) or _non_answer(words))


def is_echo(hit: SearchHit, asked: frozenset[str]) -> bool:
    """A few words that only say the question's own words back ("Cats!" for "What are my cats called?"):
    every word of the turn is one of ``asked`` (the question's words), a stop word or filler. It says
    nothing the question does not, so it answers nothing; by anyone, a person or an assistant. A turn that
    asks is none ("Got any favourite glaze?", "so what are your cats called": its reply answers,
    ``exchange.with_replies``), nor one that says no ("I don't like sushi.")."""
    if not asked or len(hit.content) > ECHO_MAX_CHARS:  # a long turn is not a few words: no need to split it
        return False
    words = _few_words(hit.content)
    return (words is not None and not hit.content.rstrip().endswith("?") and any(w in asked for w in words)
            and not (WH_WORDS.intersection(words[:3]) or any(w in _NEGATION or w.endswith("n't") for w in words))
            and all(w in asked or w in STOP_WORDS or w in FILLER_WORDS for w in words))


def is_non_answer(hit: SearchHit | None) -> bool:
    """An assistant turn that says it does not know ("Sorry, I don't know.", "I'm not sure.", "No idea."):
    a few words, all filler or ``NON_ANSWER_WORDS``, one of them a denial."""
    words = _short_reply(hit)
    return words is not None and _non_answer(words)


def _short_reply(hit: SearchHit | None) -> tuple[str, ...] | None:
    """An assistant turn's words when it has at most ``FILLER_MAX_WORDS`` of them, else None."""
    if hit is None or hit.role != "assistant":
        return None
    return _few_words(hit.content)


@per_text
def _few_words(text: str) -> tuple[str, ...] | None:
    words = tokenize(text)
    return tuple(words) if len(words) <= FILLER_MAX_WORDS else None


def _non_answer(words: Sequence[str]) -> bool:
    return (any(w in _DENIAL for w in words)
            and all(w in STOP_WORDS or w in FILLER_WORDS or w in NON_ANSWER_WORDS for w in words))


def unanswered(asker: SearchHit, reply: SearchHit | None) -> bool:
    """A turn that asks ("?") and got a non-answer (the next turn, ``is_non_answer``): no evidence of its answer."""
    return "?" in asker.content and is_non_answer(reply)


def is_noise(c: Candidate) -> bool:
    """A turn that is no evidence by its shape (see the module docstring)."""
    h = c.hit
    if h is not None and h.role == "tool" and h.name and set(h.name.split(",")) <= BOILERPLATE_TOOLS:
        return True
    if _PLAN_CALL.match(c.text):
        return True
    return len(_WORD.findall(_evidence_of(c))) < MIN_WORDS


def _evidence_of(c: Candidate) -> str:
    """``evidence_text`` of a candidate's text, read as its speaker's."""
    return evidence_text(c.text, c.hit.role if c.hit is not None else None)


def cleaned_matches(r: Reading, cands: list[Candidate], stems: set[str]) -> dict[str, set[str]]:
    """Per candidate key, the prompt's stems its own text (and its neighbour's) matches outside host text.

    A candidate whose own text is only host text is left out.
    """
    out: dict[str, set[str]] = {}
    cleaned = {c.key: _evidence_of(c) for c in cands}
    dirty = [c for c in cands if cleaned[c.key] != c.text]
    analysed = (dict(zip((c.key for c in dirty), r.store.analyze([cleaned[c.key] for c in dirty])))
                if dirty else {})
    for c in cands:
        if c.kind == "turn" and is_noise(c):
            continue
        if c.key in analysed:
            own = set(analysed[c.key])
            if not own:
                continue
            matched = own & stems
        else:
            matched = set(c.matched) & stems
        out[c.key] = matched | (set(c.nb_only) & stems)
    return out
