"""Person-name rules of entity resolution: short forms (first names, nicknames, clipped names) and roles.

Pure functions over normalised names (:func:`~tortoise_sdk.text.norm_name`); the store applies
them when it resolves an entity. Nicknames come from the ``nicknames`` package (a hand-curated
table of English names and their nicknames, Apache-2.0); a clipped form of at least
:data:`MIN_CLIPPED` letters ("Mel" for "Melanie") counts too, as people shorten names that way
more often than any table lists.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .text import norm_name

__all__ = ("MIN_CLIPPED", "ROLES", "ROLE_IN_TEXT", "entities_named", "host_entity_kind", "note_role", "role_key", "role_statements", "short_form_of",
           "why_short")

#: The fewest letters a clipped first name ("Mel", "Rob") must keep to count as a short form.
MIN_CLIPPED = 3

#: Relationship words a person is named by ("my wife"): a role key is the possessor and one of these.
ROLES = frozenset({
    "wife", "husband", "partner", "spouse", "girlfriend", "boyfriend", "fiance", "fiancee",
    "mother", "mom", "mum", "father", "dad", "son", "daughter", "brother", "sister",
    "grandmother", "grandma", "grandfather", "grandpa", "aunt", "uncle", "cousin", "niece", "nephew",
    "boss", "manager", "roommate", "flatmate", "therapist", "doctor", "best friend",
})
#: One spelling per role, so "mom" and "mother" are one role.
_SAME_ROLE = {"mom": "mother", "mum": "mother", "grandma": "grandmother", "dad": "father",
              "grandpa": "grandfather", "fiancee": "fiance", "flatmate": "roommate", "spouse": "partner"}
#: Possessors meaning the namespace's user (after normalisation: apostrophes are dropped).
_USER = ("my", "our", "the users", "users", "the user s", "user s", "the user", "user")
_ROLE_WORDS = "|".join(sorted((re.escape(r) for r in ROLES), key=len, reverse=True))
_ROLE_PHRASE = re.compile(rf"^(?:(?P<poss>.+?)\s+)?(?P<role>{_ROLE_WORDS})$")


@lru_cache(maxsize=1)
def _nicknamer():  # type: ignore[no-untyped-def]
    from nicknames import NickNamer

    return NickNamer()


def _first_forms(short: str, first: str) -> str | None:
    """How the single word ``short`` is a short form of the first name ``first`` (None: it is not)."""
    if short == first:
        return "first name"
    nn = _nicknamer()
    if first in nn.canonicals_of(short):
        # The table lists some pairs both ways ("bob" and "robert"): the shorter is the nickname then,
        # so the relation has one direction and a fuller name always wins, whatever came first.
        if short not in nn.canonicals_of(first) or len(short) < len(first):
            return "nickname"
    if len(short) >= MIN_CLIPPED and first.startswith(short):
        return "clipped name"
    return None


def why_short(short: str, full: str) -> str | None:
    """Why the normalised name ``short`` names the person ``full`` too, or None.

    ``short`` is a short form of ``full`` when its first word is ``full``'s first word, a
    nickname of it ("bob" for "robert") or a clipped form ("mel" for "melanie"), and its other
    words, if any, are ``full``'s other words ("mel hart" for "melanie hart"). A name is not a
    short form of itself.
    """
    s, f = short.split(), full.split()
    if not s or not f or s == f or role_key(short) or role_key(full):
        return None
    if len(s) > 1 and s[1:] != f[1:]:
        return None
    if len(s) == 1 and len(f) == 1 and s[0] == f[0]:
        return None
    return _first_forms(s[0], f[0])


def short_form_of(short: str, full: str) -> bool:
    """Whether ``short`` is a short form of ``full`` (see :func:`why_short`)."""
    return why_short(short, full) is not None


def _possessor(words: str) -> str:
    if words in _USER:
        return "user"
    words = re.sub(r"\s+s$", "", re.sub(r"^the\s+", "", words))
    # Sam's, Sams and Sam are one possessor, and James's, James' and James are one: final s letters go.
    return words.rstrip("s") or words


def role_key(name: str) -> str | None:
    """The role a name is ("my wife" -> ``"user's wife"``, "Sam's mom" -> ``"sam's mother"``), else None.

    A bare role word is the user's ("wife" -> ``"user's wife"``).
    """
    m = _ROLE_PHRASE.match(norm_name(name))
    if m is None:
        return None
    role = _SAME_ROLE.get(m["role"], m["role"])
    poss = m["poss"]
    return f"{'user' if poss is None else _possessor(poss)}'s {role}"


_STATED = re.compile(
    rf"^(?P<name>[\w .'-]+?)\s+(?:is|was|has been|became)\s+(?P<poss>my|our|the user's|the user’s|[\w.'’-]+(?:'s|’s))"
    rf"\s+(?:(?:new|future|current|late|older|younger|little|big|ex)\s+)?(?P<role>{_ROLE_WORDS})\b",
    re.IGNORECASE)
_STATED_BACK = re.compile(
    rf"^(?i:(?P<poss>my|our|the user's|the user’s|[\w.'’-]+(?:'s|’s))\s+(?P<role>{_ROLE_WORDS}))(?:,|\s+(?i:is|was))?\s+"
    r"(?i:called\s+|named\s+)?(?P<name>[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
_NOTE = re.compile(rf"^(?:the\s+|a\s+)?(?P<poss>my|our|the user's|the user’s|user's|[\w.'’-]+(?:'s|’s))?\s*"
                   rf"(?P<role>{_ROLE_WORDS})\b(?:\s+of\s+(?P<of>the user|[\w.'’-]+))?", re.IGNORECASE)


def _key(poss: str | None, role: str) -> str:
    return role_key(f"{poss or 'my'} {role}") or ""


def role_statements(content: str, about: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """``(person name, role key)`` pairs a sentence states ("Melanie is the user's wife", "Sam's wife is
    Melanie"), for persons it is ``about``; other sentences give none."""
    out = []
    names = {norm_name(a): a for a in about}
    for pattern in (_STATED, _STATED_BACK):
        m = pattern.search(content.strip())
        if m and norm_name(m["name"]) in names and not role_key(m["name"]):
            out.append((names[norm_name(m["name"])], _key(m["poss"], m["role"])))
    return out


def note_role(note: str | None) -> str | None:
    """The role an entity's note gives it ("the user's wife", "Sam's sister, a nurse"), else None."""
    if not note:
        return None
    m = _NOTE.match(note.strip())
    if m is None:
        return None
    return _key(m["poss"] or (f"{m['of']}'s" if m["of"] else None), m["role"])


#: A role phrase in normalised text ("my wife", "sams mother"), as ``phrase``.
ROLE_IN_TEXT = re.compile(rf"\b(?P<phrase>(?:(?:my|our|the user s|the users|user s|[\w]+ s|[\w]+s)\s+)?"
                           rf"(?:{_ROLE_WORDS}))\b")


def entities_named(text: str, entities: list[dict]) -> list[str]:  # type: ignore[type-arg]
    """The names of the ``entities`` (``Store.entities`` dicts) that ``text`` names: by name, by an alias,
    by a person's first name, or by a role one of them holds ("my wife"); in the order of ``entities``."""
    words = f" {norm_name(text)} "
    roles = {role_key(m["phrase"]) for m in ROLE_IN_TEXT.finditer(norm_name(text))} - {None}
    out = []
    for e in entities:
        forms = {norm_name(e["name"])}
        if e.get("kind") == "person":
            forms.add(norm_name(e["name"]).split()[0] if norm_name(e["name"]) else "")
        aliases = e.get("aliases") or []
        forms |= {norm_name(a["name"]) for a in aliases if a.get("how") != "role"}
        held = {a["name"] for a in aliases if a.get("how") == "role"}
        if any(f and f" {f} " in words for f in forms) or held & roles:
            out.append(e["name"])
    return out


def host_entity_kind(name: str) -> str:
    """The kind of an entity a host named without one (``Memory.remember(about=[...])``).

    ``"person"`` when every word of ``name`` is capitalised and its first word is a given name
    the ``nicknames`` table knows ("Melanie Hart", "Bob"), so the person rules (short forms,
    roles) apply to it as to an extracted person; ``"other"`` otherwise ("Helix Health", "Art
    class", or a name the table lacks, such as "Maya": pass ``about={"Maya": "person"}`` then).
    """
    words = name.split()
    first = norm_name(words[0]) if words else ""
    if not first or not all(w[:1].isupper() for w in words):
        return "other"
    nn = _nicknamer()
    return "person" if nn.nicknames_of(first) or nn.canonicals_of(first) else "other"
