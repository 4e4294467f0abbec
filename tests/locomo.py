"""Loading the LoCoMo conversations in ../shared/data/locomo (CC BY-NC 4.0, evaluation only).

Used by tests and benchmarks; the reading itself is ``tortoise_sdk.evaluation.locomo`` (what
``tortoise eval locomo`` uses). Only a small excerpt is copied into the repository
(tests/data/locomo_conv26_excerpt.json, with its licence in tests/data/README.md).
"""

from __future__ import annotations

from pathlib import Path

from needs import LOCOMO_DIR, needs_locomo
from tortoise_sdk.evaluation.locomo import Question, load_conversations, parse_date

__all__ = ("LOCOMO_DIR", "SKIP_REASON", "Question", "load_chat", "load_questions", "load_sessions", "locomo_files",
           "needs_locomo", "parse_date")

#: What a benchmark prints when the data is absent (tests use ``needs_locomo``).
SKIP_REASON = f"LoCoMo data not found at {LOCOMO_DIR} (it lives beside the repo in CI, not in a user's clone)"


def locomo_files() -> list[Path]:
    """The conversation files, sorted; empty when the shared data is absent."""
    return sorted(LOCOMO_DIR.glob("*.json")) if LOCOMO_DIR.is_dir() else []


def load_sessions(path: Path) -> list[dict]:
    """The sessions of a one-conversation file: date, speaker as name, dia_id as id, caption appended."""
    (conv,) = load_conversations(path)
    return conv.sessions


def load_questions(path: Path, *, include_adversarial: bool = False) -> list[Question]:
    """QA items that cite evidence; category 5 (adversarial) excluded by default."""
    (conv,) = load_conversations(path)
    return [q for q in conv.questions if q.evidence and (include_adversarial or q.category != 5)]


def load_chat(path: Path, turns: int = 300) -> list[tuple[dict, dict]]:
    """The first ``turns`` turns of a conversation as one chat of exchanges, for a loop to replay.

    The sessions are read in order as one conversation; each pair of turns is an exchange
    (the first speaker's turn as the user's message, the reply as the assistant's), the speaker
    kept as ``name`` and LoCoMo's dia_id as the message ``id``.
    """
    flat = [t for s in load_sessions(path) for t in s["turns"]][:turns - turns % 2]
    as_role = [{**t, "role": "user" if i % 2 == 0 else "assistant"} for i, t in enumerate(flat)]
    return list(zip(as_role[0::2], as_role[1::2]))
