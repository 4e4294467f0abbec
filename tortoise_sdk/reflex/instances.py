"""Kinds and their instances: a question that names a category reaches turns that name its members.

"What activities does she do?" shares no word with "I went hiking" or "I signed up for a pottery
class"; "martial arts" none with "taekwondo". The table ``instances.tsv.gz`` (built from WordNet 3.0
by ``benchmarks/build_instances.py``: for each common noun, the single-word nouns a few hyponym links
below it, most used first; WordNet's licence in ``instances.LICENSE``) lists each category's
instances. When a question that asks for several things of a kind (``ranker.listing``: "what
activities does...", "which cities has...", "what kind of art...") names a category with a content
word (or two adjacent words, "martial arts"), those of its instances the namespace holds join the
candidate search, in one more full-text read of their own, at ``INSTANCE_WEIGHT`` of
their weight, never more than the category word's own. For the coverage gate a turn naming an
instance covers the category word at ``INSTANCE_WEIGHT`` of its weight (once, whatever the number
of instances it names), never more than the word itself would: the words of the question decide
whether it is answered, so an unrelated question stays silent.
"""

from __future__ import annotations

import gzip
import math
from functools import cache
from importlib import resources

from ..search import query_terms
from . import tuning
from .ranker import listing
from .shapes import Reading, Term

__all__ = ("categories", "instance_terms", "lemmas", "table")


@cache
def table() -> dict[str, str]:
    """``category -> its instances, space-separated`` (a two-word category joined by ``_``), read once
    from the package data. A line holds synonyms (``city metropolis``), a tab, their instances; the
    instances are split only when asked for, so reading the table costs tens of milliseconds."""
    raw = gzip.decompress(resources.files(__package__).joinpath("instances.tsv.gz").read_bytes()).decode("utf-8")
    out: dict[str, str] = {}
    for line in raw.splitlines():
        if line and not line.startswith("#"):
            keys, _, instances = line.partition("\t")
            out.update(dict.fromkeys(keys.split(), instances))
    return out


def lemmas(word: str) -> list[str]:
    """A noun's possible dictionary forms, itself first (WordNet's detachment rules for nouns)."""
    out = [word]
    for suffix, repl in (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("ses", "s"), ("xes", "x"), ("zes", "z"),
                         ("men", "man"), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2 and not (suffix == "s" and word.endswith("ss")):
            out.append(word[: -len(suffix)] + repl)
    return list(dict.fromkeys(out))


def categories(words: list[str]) -> list[tuple[tuple[int, ...], str]]:
    """The categories ``words`` name, as ``(positions of their words, table key)``: two adjacent words
    first ("martial arts"), then single words not part of a pair already found."""
    known = table()
    found: list[tuple[tuple[int, ...], str]] = []
    used: set[int] = set()
    for i in range(len(words) - 1):
        key = next((f"{words[i]}_{b}" for b in lemmas(words[i + 1]) if f"{words[i]}_{b}" in known), None)
        if key is not None and i not in used and i + 1 not in used:
            found.append(((i, i + 1), key))
            used.update((i, i + 1))
    for i, w in enumerate(words):
        if i in used:
            continue
        key = next((k for k in lemmas(w) if k in known), None)
        if key is not None:
            found.append(((i,), key))
    return found


def instance_terms(r: Reading, terms: list[Term], query: str) -> list[Term]:
    """The instances of the categories a listing question names that the namespace holds, as extra terms.

    At most ``INSTANCE_CATEGORIES`` categories (the heaviest) and ``INSTANCE_TERMS`` instances
    between them (the rarest in the namespace first; one in more than ``MAX_DF_SHARE`` of the turns
    is too common to point anywhere). Each weighs ``INSTANCE_WEIGHT`` times the lesser of its own
    IDF and its category's weight; ``Term.instance_of`` names the category's stems.
    """
    if tuning.INSTANCE_WEIGHT <= 0 or not listing(query):
        return []
    words = query_terms(query)
    mine = {t.stem: t for t in terms if not t.context and not t.is_name and not t.date}
    if not words or not mine:
        return []
    stems = r.store.analyze(words)
    stem_at = [st[0] if len(st) == 1 else None for st in stems]
    cats: list[tuple[float, str, tuple[str, ...]]] = []
    for at, key in categories(words):
        cat_stems = tuple(s for i in at if (s := stem_at[i]) is not None)
        if len(cat_stems) == len(at) and all(s in mine for s in cat_stems):
            cats.append((sum(mine[s].weight for s in cat_stems), key, cat_stems))
    cats = sorted(cats, key=lambda c: (-c[0], c[1]))[: tuning.INSTANCE_CATEGORIES]
    if not cats:
        return []
    have = {t.stem for t in terms}
    wanted = [(w, i) for i, (_, key, _) in enumerate(cats) for w in table()[key].split()]
    analysed = r.store.analyze([w for w, _ in wanted])
    by_stem: dict[str, tuple[str, int]] = {}
    for (w, i), st in zip(wanted, analysed):
        if len(st) == 1 and st[0] not in have and st[0] not in by_stem:
            by_stem[st[0]] = (w, i)
    if not by_stem:
        return []
    n, stats = r.store.term_stats(r.ns, list(by_stem))
    r.tick()
    common = max(tuning.COMMON_DF_FLOOR, int(n * tuning.MAX_DF_SHARE))
    sized = max(n, tuning.MIN_WEIGHTING_TURNS)
    held = sorted(((df, stem) for stem, (df, _) in stats.items() if 0 < df <= common), key=lambda x: x)
    out = []
    for df, stem in held[: tuning.INSTANCE_TERMS]:
        surface, i = by_stem[stem]
        cat_weight, _, cat_stems = cats[i]
        idf = math.log(1 + (sized - df + 0.5) / (df + 0.5))
        out.append(Term(surface, stem, tuning.INSTANCE_WEIGHT * min(idf, cat_weight), df, context=True,
                        instance_of=cat_stems))
    return out
