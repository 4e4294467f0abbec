"""Build the reflex's category -> instance table (``tortoise_sdk/reflex/instances.tsv.gz``, gzipped text) from WordNet 3.0.

A question names a category ("what activities does she do?", "martial arts") where the evidence
names instances ("pottery class", "kickboxing"). This script reads WordNet's noun database (Debian's
``wordnet-base``: ``/usr/share/wordnet``) and writes, for each common noun, the single-word nouns
below its most used senses (hyponyms and instances, a bounded depth), nearest first. The reflex
reads the table at query time (``reflex.instances``); nothing in it is written by hand, and a rerun
on the same WordNet files gives the same bytes.

Bounds (so the table stays small): a category is a one-word noun whose noun senses were tagged at
least ``MIN_KEY_COUNT`` times in WordNet's semantic concordance (``cntlist.rev``), or a two-word one
(a compound such as "martial art" names a category by itself, and is rarely tagged); its senses are
the first ``SENSES`` that were tagged at all (a word never tagged: its first sense); instances are at
most ``DEPTH`` hyponym links below (WordNet's hyponyms and instances: "Rome" is an instance of
"national capital", a hyponym of "city"), single words of three letters or more, at most ``PER_KEY``
of them, nearest first, then by their sense's tag count, then spelling. Only categories with at least
``MIN_INSTANCES`` instances are written; synonyms with the same instances share a line.

Usage::

    python benchmarks/build_instances.py [--wordnet /usr/share/wordnet] [--out tortoise_sdk/reflex/instances.tsv.gz]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MIN_KEY_COUNT = 2
SENSES = 2
DEPTH = 2
PER_KEY = 1000
MIN_INSTANCES = 3
_WORD = re.compile(r"^[a-z]{3,}$")
_HYPONYM = ("~", "~i")

HEADER = ("# tortoise-sdk reflex: category -> instances, built from WordNet 3.0 by benchmarks/build_instances.py\n"
          "# (MIN_KEY_COUNT={k} SENSES={s} DEPTH={d} PER_KEY={p} MIN_INSTANCES={m}); WordNet's licence: instances.LICENSE\n")


def _read_data(path: Path) -> dict[str, tuple[list[tuple[str, int]], list[str]]]:
    """``offset -> ([(lemma, lex_id)...], [hyponym offsets])`` of data.noun, with the synset's lex file number first."""
    synsets: dict[str, tuple[list[tuple[str, int]], list[str]]] = {}
    lexfile: dict[str, int] = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue
        f = line.split(" | ")[0].split()
        offset, lex_filenum, n_words = f[0], int(f[1]), int(f[3], 16)
        words = [(f[4 + 2 * i], int(f[5 + 2 * i], 16)) for i in range(n_words)]
        at = 4 + 2 * n_words
        n_ptrs = int(f[at])
        hypo = [f[at + 1 + 4 * i + 1] for i in range(n_ptrs)
                if f[at + 1 + 4 * i] in _HYPONYM and f[at + 1 + 4 * i + 2] == "n"]
        synsets[offset] = (words, hypo)
        lexfile[offset] = lex_filenum
    return {o: (w, h, lexfile[o]) for o, (w, h) in synsets.items()}  # type: ignore[misc]


def _read_counts(path: Path) -> dict[str, int]:
    """``sense key -> tag count`` of the noun senses in cntlist.rev."""
    out: dict[str, int] = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        key, _, count = line.split()
        if "%1:" in key:
            out[key.lower()] = int(count)
    return out


def _sense_key(lemma: str, lex_filenum: int, lex_id: int) -> str:
    return f"{lemma.lower()}%1:{lex_filenum:02d}:{lex_id:02d}::"


def build(wordnet: Path) -> str:
    data = _read_data(wordnet / "data.noun")
    counts = _read_counts(wordnet / "cntlist.rev")

    def count(offset: str, lemma: str) -> int:
        words, _, lexf = data[offset]  # type: ignore[misc]
        for w, lex_id in words:
            if w.lower() == lemma.lower():
                return counts.get(_sense_key(w, lexf, lex_id), 0)
        return 0

    senses: dict[str, list[str]] = {}
    for line in (wordnet / "index.noun").read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue
        f = line.split()
        lemma, n_senses = f[0], int(f[2])
        senses[lemma] = f[-n_senses:]
    table: dict[str, list[str]] = {}
    for lemma in sorted(senses):
        if lemma.count("_") > 1 or not all(_WORD.match(p) or (p.isalpha() and len(p) > 1) for p in lemma.split("_")):
            continue
        tagged = [(o, count(o, lemma)) for o in senses[lemma]]
        if sum(c for _, c in tagged) < MIN_KEY_COUNT and "_" not in lemma:
            continue
        best: dict[str, tuple[int, int]] = {}  # instance -> (-tag count, depth), the best of its senses found
        # The senses the concordance tagged, most used first; an untagged word ("martial_art"), its first.
        for offset in ([o for o, c in tagged if c > 0][:SENSES] or [o for o, _ in tagged[:1]]):
            frontier, seen = [offset], {offset}
            for depth in range(1, DEPTH + 1):
                nxt = []
                for o in frontier:
                    for h in data[o][1]:  # type: ignore[index]
                        if h in seen:
                            continue
                        seen.add(h)
                        nxt.append(h)
                        for w, _ in data[h][0]:  # type: ignore[index]
                            word = w.lower()
                            if _WORD.match(word) and word != lemma and word not in lemma.split("_"):
                                rank = (depth, -count(h, w))
                                if word not in best or rank < best[word]:
                                    best[word] = rank
                frontier = nxt
        if len(best) >= MIN_INSTANCES:
            table[lemma] = sorted(best, key=lambda w: (*best[w], w))[:PER_KEY]
    head = HEADER.format(k=MIN_KEY_COUNT, s=SENSES, d=DEPTH, p=PER_KEY, m=MIN_INSTANCES)
    # Synonyms ("city", "metropolis", "urban_center") share one line: their keys, then the instances.
    by_list: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for key, instances in sorted(table.items()):
        by_list[tuple(instances)].append(key)
    lines = sorted(f"{' '.join(keys)}\t{' '.join(instances)}\n" for instances, keys in by_list.items())
    return head + "".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wordnet", default="/usr/share/wordnet", help="WordNet 3.0 dict directory (data.noun, ...)")
    ap.add_argument("--out", default=str(ROOT / "tortoise_sdk" / "reflex" / "instances.tsv.gz"))
    args = ap.parse_args()
    text = build(Path(args.wordnet)).encode("utf-8")
    packed = gzip.compress(text, compresslevel=9, mtime=0)  # mtime 0: the same input gives the same bytes
    Path(args.out).write_bytes(packed)
    keys = sum(len(line.split(b"\t")[0].split()) for line in text.splitlines() if not line.startswith(b"#"))
    print(f"{args.out}: {keys} categories, {len(text):,} bytes ({len(packed):,} gzipped), "
          f"sha256 {hashlib.sha256(packed).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
