"""The host's vocabulary: its own memory categories and extraction instructions, checked once and rendered
into the S1/S2/S4 prompts as an optional section (absent when the host gives neither)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .errors import ConfigError

__all__ = ("MAX_CATEGORIES", "MAX_INSTRUCTIONS_CHARS", "Vocabulary", "vocabulary")

MAX_CATEGORIES = 50
MAX_CATEGORY_CHARS = 40
MAX_INSTRUCTIONS_CHARS = 4000
#: The line of the S1/S2/S4 templates the section goes before (the new turns come last).
ANCHOR = "New turns (each line is [turn index] speaker: text):"


class Vocabulary(BaseModel):
    """Categories the host files memories under, and what to keep or ignore (free text)."""

    model_config = ConfigDict(frozen=True)

    categories: tuple[str, ...] = ()
    instructions: str | None = None

    @field_validator("categories", mode="before")
    @classmethod
    def _categories(cls, value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str) or not isinstance(value, Iterable):
            raise ValueError("give a list of category names, e.g. categories=['health', 'work']")
        out: dict[str, str] = {}
        for name in value:
            if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_CATEGORY_CHARS:
                raise ValueError(f"each category is a non-blank string of at most {MAX_CATEGORY_CHARS} "
                                 f"characters; got {name!r}")
            if any(ch in name for ch in "\n\r,"):
                raise ValueError(f"a category holds no comma or line break; got {name!r}")
            out.setdefault(name.strip().casefold(), name.strip())
        if len(out) > MAX_CATEGORIES:
            raise ValueError(f"at most {MAX_CATEGORIES} categories; got {len(out)}")
        return tuple(out.values())

    @field_validator("instructions", mode="before")
    @classmethod
    def _instructions(cls, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError("extraction_instructions is a string")
        text = value.strip()
        if len(text) > MAX_INSTRUCTIONS_CHARS:
            raise ValueError(f"extraction_instructions holds at most {MAX_INSTRUCTIONS_CHARS} characters; "
                             f"got {len(text)}")
        return text or None

    def __bool__(self) -> bool:
        return bool(self.categories or self.instructions)

    def category(self, value: str | None) -> str | None:
        """The host's spelling of ``value`` when it names one of the categories (case ignored), else None.

        Without categories any non-blank category a model gives is kept as written."""
        if value is None or not str(value).strip():
            return None
        value = " ".join(str(value).split())
        if not self.categories:
            return value
        return next((c for c in self.categories if c.casefold() == value.casefold()), None)

    def section(self, stage: str) -> str:
        """The prompt section for ``stage`` (s1_narrate, s2_map, s4_review); empty when there is nothing to say."""
        lines = []
        if self.categories:
            listed = ", ".join(self.categories)
            if stage == "s1_narrate":
                lines.append(f"The application files memories under these categories: {listed}.")
            else:
                lines.append(f'Give each event and point a "category": one of {listed}; '
                             "leave it out when none fits.")
        if self.instructions:
            lines.append(f"What to keep and what to ignore, in the application's words:\n{self.instructions}")
        return "The application's vocabulary:\n" + "\n".join(lines) if lines else ""


def vocabulary(categories: Iterable[str] | None, instructions: str | None) -> Vocabulary | None:
    """The checked vocabulary, or None when the host gave neither.

    Raises:
        ConfigError: a category or the instructions are malformed (``field`` names which).
    """
    try:
        vocab = Vocabulary(categories=categories, instructions=instructions)  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        field = "categories" if err["loc"] and err["loc"][0] == "categories" else "extraction_instructions"
        raise ConfigError(str(err["msg"]).removeprefix("Value error, "), field=field) from None
    return vocab or None
