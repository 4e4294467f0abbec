"""Loading the LoCoMo conversations in ../shared/data/locomo (CC BY-NC 4.0, evaluation only).

Used by tests and benchmarks; no LoCoMo text is copied into the repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOCOMO_DIR = SHARED_DATA / "locomo"
SKIP_REASON = f"LoCoMo data not found at {LOCOMO_DIR} (it lives beside the repo in CI, not in a user's clone)"


@dataclass(frozen=True)
class Question:
    question: str
    evidence: frozenset[str]
    category: int


def locomo_files() -> list[Path]:
    """The conversation files, sorted; empty when the shared data is absent."""
    return sorted(LOCOMO_DIR.glob("*.json")) if LOCOMO_DIR.is_dir() else []


def parse_date(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56:00'."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").isoformat()


def load_sessions(path: Path) -> list[dict]:
    """One session object per LoCoMo session: date, speaker as name, dia_id as id, caption appended."""
    conv = json.loads(path.read_text(encoding="utf-8"))
    conv = conv.get("conversation", conv)
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
            sessions.append({
                "session_id": f"{path.stem}-s{n}",
                "date": parse_date(conv[f"session_{n}_date_time"]),
                "turns": turns,
            })
        n += 1
    return sessions


def load_questions(path: Path, *, include_adversarial: bool = False) -> list[Question]:
    """QA items with their evidence dia_ids; category 5 (adversarial) excluded by default."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for qa in data.get("qa", []):
        cat = int(qa.get("category", 0))
        if cat == 5 and not include_adversarial:
            continue
        evidence = frozenset(e.strip() for ev in qa.get("evidence", []) for e in ev.split(";") if e.strip())
        if evidence:
            out.append(Question(str(qa["question"]), evidence, cat))
    return out
