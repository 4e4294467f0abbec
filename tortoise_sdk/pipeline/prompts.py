"""Prompt templates: files named ``<stage>.md`` with ``{placeholders}``, shipped in the package, overridable."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import ConfigError
from ..models import SearchHit
from ..vocabulary import ANCHOR, Vocabulary

__all__ = ("PROMPT_NAMES", "Prompt", "coding_section", "load_prompt")

PROMPT_NAMES: tuple[str, ...] = ("s1_narrate", "s2_map", "vet", "s4_review")
_FIELD = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True)
class Prompt:
    """A loaded template, its sha256 (recorded on the receipt) and where it came from."""

    name: str
    text: str
    sha256: str
    origin: str

    @property
    def fields(self) -> frozenset[str]:
        """The placeholders the template uses."""
        return frozenset(_FIELD.findall(self.text))

    def render(self, **values: object) -> str:
        """Fill the named placeholders; other braces (JSON examples) are left as written.

        Raises:
            ConfigError: a placeholder the template uses was not given.
        """
        missing = self.fields - values.keys()
        if missing:
            raise ConfigError(f"prompt {self.origin} needs {sorted(missing)}; "
                              f"it may use only {sorted(values)}")
        return _FIELD.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), self.text)

    def with_vocabulary(self, vocabulary: Vocabulary | None) -> Prompt:
        """This template with the host's vocabulary section before its new turns (at the end, in a template
        without that line), and the sha256 of the result. Unchanged without a vocabulary, so prompts,
        hashes and recorded requests of a host that gives none stay as they were.

        A ``{name}`` in the host's text gets a zero-width space after its brace, so it is never filled in."""
        section = vocabulary.section(self.name) if vocabulary else ""
        if not section:
            return self
        section = _FIELD.sub(lambda m: "{\u200b" + m.group(1) + "}", section)
        at = self.text.find(ANCHOR)
        text = (self.text[:at] + section + "\n\n" + self.text[at:]) if at >= 0 else self.text.rstrip("\n") + \
            "\n\n" + section + "\n"
        return Prompt(self.name, text, hashlib.sha256(text.encode()).hexdigest(), self.origin + " + vocabulary")


def load_prompt(name: str, prompts_dir: str | Path | None = None) -> Prompt:
    """Read ``<name>.md`` from ``prompts_dir`` when it has one, else from the package.

    Raises:
        ConfigError: no such template.
    """
    if prompts_dir is not None:
        path = Path(prompts_dir).expanduser() / f"{name}.md"
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            return Prompt(name, text, hashlib.sha256(text.encode()).hexdigest(), str(path))
    try:
        text = resources.files("tortoise_sdk.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ConfigError(f"no prompt template {name!r}; expected {name}.md in the package prompts"
                          + (f" or in {prompts_dir}" if prompts_dir else "")) from exc
    return Prompt(name, text, hashlib.sha256(text.encode()).hexdigest(), f"tortoise_sdk.prompts/{name}.md")


def coding_section(guide: Prompt, turns: Sequence[SearchHit]) -> str:
    """The ``{coding}`` part of S1 and S2: ``guide`` (``coding.md``, what matters in a coding session) when the
    turns are a coding agent's work (a tool call or a tool result among them), else nothing: a chat's prompt
    is then exactly what it was before the section existed."""
    coding = any(t.role == "tool" or t.content.startswith("[tool_use ") or "\n[tool_use " in t.content for t in turns)
    return guide.text.strip() + "\n\n" if coding else ""
