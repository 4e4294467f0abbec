"""The LoCoMo data set (Maharana et al., 2024): its conversations, questions, categories and answer matching.

LoCoMo is CC BY-NC 4.0 and for evaluation only: nothing of it ships in this package; the
user passes the files (``locomo10.json``, or one conversation per file).

The numeric categories of ``locomo10.json`` do not follow the order the paper lists them in;
the mapping below is the one LoCoMo's own scorer uses (``task_eval/evaluation.py``: category 1
is scored by splitting into sub-answers, "multi-hop"; 5 is the adversarial check), see
snap-research/locomo issue #29.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

__all__ = (
    "ADVERSARIAL",
    "CATEGORIES",
    "NOT_MENTIONED",
    "Conversation",
    "Question",
    "evidence_recall",
    "exact_match",
    "load_conversations",
    "normalize_answer",
    "parse_date",
)

CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = 5
#: The right answer to an adversarial question (its premise is false); LoCoMo accepts any answer
#: containing "not mentioned" or "no information available".
NOT_MENTIONED = "Not mentioned in the conversation"
_ABSTAIN = ("not mentioned", "no information available")


@dataclass(frozen=True)
class Question:
    """One LoCoMo question with its gold answer and the dialogue ids of its evidence."""

    question: str
    evidence: frozenset[str]
    category: int
    answer: str | None = None
    adversarial_answer: str | None = None
    index: int = 0

    @property
    def gold(self) -> str:
        """The answer a judge compares with: ``NOT_MENTIONED`` for an adversarial question."""
        if self.category == ADVERSARIAL:
            return NOT_MENTIONED
        return self.answer or ""

    @property
    def category_name(self) -> str:
        return CATEGORIES.get(self.category, f"category {self.category}")


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo conversation: its sessions (capture input, in order, dated) and its questions."""

    conversation_id: str
    sessions: list[dict[str, Any]]
    questions: list[Question]


def parse_date(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00'."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").isoformat()


def load_conversations(path: str | Path) -> list[Conversation]:
    """The conversations of a LoCoMo file.

    Accepts the published ``locomo10.json`` (a list of ``{"sample_id", "conversation", "qa"}``),
    one such object, or one conversation whose ``qa`` sits beside its sessions. Each session
    becomes ``{"session_id": "<id>-s<n>", "date", "turns"}`` with the speaker as the turn's name,
    the ``dia_id`` as its id and a shared photo's caption appended to the text.

    Raises:
        InvalidInput: the file is not LoCoMo-shaped (the message says what is missing).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput(f"not valid JSON: {exc}", field=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8 JSON (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                           "give the LoCoMo JSON file (locomo10.json)", field=str(path)) from None
    samples = data if isinstance(data, list) else [data]
    out = []
    for i, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise InvalidInput(f"item {i} is not a LoCoMo conversation object", field=str(path))
        conv = sample.get("conversation", sample)
        if not isinstance(conv, Mapping) or "session_1" not in conv:
            raise InvalidInput(f"item {i} has no session_1: not a LoCoMo conversation", field=str(path))
        cid = str(sample.get("sample_id") or (path.stem if len(samples) == 1 else f"{path.stem}-{i}"))
        out.append(Conversation(cid, _sessions(cid, conv), list(_questions(sample.get("qa") or []))))
    return out


def _sessions(cid: str, conv: Mapping[str, Any]) -> list[dict[str, Any]]:
    sessions = []
    n = 1
    while f"session_{n}" in conv:
        turns = []
        for t in conv[f"session_{n}"]:
            text = t["text"]
            if t.get("blip_caption"):
                text = f"{text} [shares a photo: {t['blip_caption']}]"
            turns.append({"role": "user", "name": t["speaker"], "id": t["dia_id"], "content": text})
        if turns:
            sessions.append({"session_id": f"{cid}-s{n}", "date": parse_date(conv[f"session_{n}_date_time"]),
                             "turns": turns})
        n += 1
    return sessions


def _questions(qa: Iterable[Mapping[str, Any]]) -> Iterable[Question]:
    for i, item in enumerate(qa):
        evidence = frozenset(e.strip() for ev in item.get("evidence", []) for e in str(ev).split(";") if e.strip())
        answer = item.get("answer")
        adversarial = item.get("adversarial_answer")
        yield Question(str(item["question"]), evidence, int(item.get("category", 0)),
                       None if answer is None else str(answer), None if adversarial is None else str(adversarial), i)


def evidence_recall(found: Iterable[str | None], evidence: frozenset[str]) -> float | None:
    """The share of a question's evidence dialogue ids among ``found``; None when it has no evidence."""
    if not evidence:
        return None
    return len(evidence & set(found)) / len(evidence)


_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """LoCoMo's answer normalisation: lower case, no commas or punctuation, no articles or 'and', single spaces."""
    text = text.replace(",", "").lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(generated: str, question: Question) -> bool:
    """The model-free judge: the normalised gold answer equals, or appears word-aligned in, the normalised answer.

    An adversarial question is answered right when the answer says the conversation does not
    mention it (LoCoMo's own rule); an open-domain gold answer counts up to its first ';' (as
    LoCoMo's scorer does).
    """
    if question.category == ADVERSARIAL:
        said = generated.lower()
        return any(phrase in said for phrase in _ABSTAIN)
    gold = question.gold
    if question.category == 3:
        gold = gold.split(";")[0]
    gold, said = normalize_answer(gold), normalize_answer(generated)
    if not gold:
        return False
    return gold == said or f" {gold} " in f" {said} "
