"""Grounding on real turns: which quotes the rule accepts, beside the previous rule (baseline, same run).

Quotes are drawn from the LoCoMo turns in ../shared/data/locomo (CC BY-NC 4.0,
evaluation only). Each quote is checked against every turn of its session, as
``pipeline.grounding.ground`` does.

Must be accepted (goal >= 99 %): spans of a turn as a model quotes them: exact,
cut mid-word at the start, the end or both, case changed, punctuation and curly
quotes changed, spacing changed, ``...`` elisions, and mixes of these. A quote
cut mid-word keeps at least three complete words or 12 characters of them (the
floor); shorter cut quotes are reported on their own row, rejected by design
unless they happen to be whole words of another turn.

Must be rejected (goal 0 %): the same kind of spans with one content word replaced
(also combined with the perturbations above, and with the elision right beside
the new word, or a fragment of the old word next to an elision, "a ... eagle"
for "a beagle"); quotes from another session; fabricated sentences (two turns
spliced, words of a span shuffled, template sentences with the session's names).

The rates depend on no timing: the figures are the same on a loaded machine.

Last, of the accepted quotes: how many are stored as the turn's own text, as ``verbatim()`` stores them
beside the model's quote as written (what was stored before), on the same quotes.

Run: .venv/bin/python benchmarks/bench_grounding.py [--per-class 2000] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from locomo import load_sessions, locomo_files  # noqa: E402

import figures  # noqa: E402
from tortoise_sdk.pipeline.grounding import match_key, quote_parts, verbatim  # noqa: E402
from tortoise_sdk.pipeline.grounding import _match as new_match  # noqa: E402
from tortoise_sdk.text import norm_quote  # noqa: E402

STOP = frozenset("""a an the and or but so to of in on at for with from by is am are was were be been being i you he
she it we they me him her us them my your his its our their this that these those what which who whom how why when where
there here not no yes just very really too also can could would should will shall may might must do does did have has had
im it's i'm that's don't can't you're i've i'd i'll we're they're as if then than about into out up down over again more
most some any all one two get got go going went like know think yeah oh hey wow""".split())


# -- the previous rule, verbatim (baseline) ---------------------------------------------------------

def baseline_match(text: str, quote: str) -> bool:
    """The rule before this change: norm_quote, word boundaries at every part's ends, 200-char elisions."""
    parts = [p.strip(" \"'") for p in norm_quote(quote).split("...")]
    parts = [p for p in parts if p]
    joined = " ".join(parts)
    if not parts or (len(joined.split()) < 3 and len(joined) < 12):
        return False
    at, first = 0, True
    for part in parts:
        pattern = (r"(?<!\w)" if part[0].isalnum() else "") + re.escape(part) + (r"(?!\w)" if part[-1].isalnum() else "")
        match = re.compile(pattern).search(text, at)
        if match is None or (not first and match.start() - at > 200):
            return False
        at, first = match.end(), False
    return True


def naive_match(key: str, parts: Sequence[str]) -> bool:
    """What the rule would be without word boundaries: parts as plain substrings, in order, same floor."""
    joined = " ".join(parts)
    if not parts or (len(joined.split()) < 3 and len(joined) < 12):
        return False
    at, first = 0, True
    for part in parts:
        i = key.find(part, at)
        if i < 0 or (not first and i - at > 200):
            return False
        at, first = i + len(part), False
    return True


# -- perturbations a model's quoting shows ----------------------------------------------------------

Perturb = Callable[[list[str], random.Random], "list[str] | None"]


def _alnum_span(word: str) -> tuple[int, int]:
    """Where the letters of a token are (``"drove!"`` -> 0..5)."""
    letters = [i for i, c in enumerate(word) if c.isalnum()]
    return (letters[0], letters[-1] + 1) if letters else (0, 0)


def cut_start(words: list[str], rng: random.Random) -> list[str] | None:
    a, b = _alnum_span(words[0])
    if b - a < 2:
        return None
    cut = rng.randint(a + 1, b - 1)
    return [("..." if rng.random() < 0.5 else "") + words[0][cut:], *words[1:]]


def cut_end(words: list[str], rng: random.Random) -> list[str] | None:
    a, b = _alnum_span(words[-1])
    if b - a < 2:
        return None
    cut = rng.randint(a + 1, b - 1)
    return [*words[:-1], words[-1][:cut] + ("..." if rng.random() < 0.3 else "")]


def cut_both(words: list[str], rng: random.Random) -> list[str] | None:
    first = cut_start(words, rng)
    return cut_end(first, rng) if first and len(first) > 1 else None


def case(words: list[str], rng: random.Random) -> list[str]:
    how = rng.choice([str.upper, str.lower, str.title, str.swapcase, str.capitalize])
    return how(" ".join(words)).split(" ")


_CURLY = str.maketrans({"'": "\u2019", '"': "\u201d"})


def punctuation(words: list[str], rng: random.Random) -> list[str]:
    out = [w.translate(_CURLY) if rng.random() < 0.7 else w for w in words]
    choice = rng.randrange(5)
    if choice == 0:  # trailing punctuation dropped or added
        out[-1] = out[-1].rstrip(".!?,;:") or out[-1]
    elif choice == 1:
        out[-1] += rng.choice([".", "!", ","])
    elif choice == 2:  # commas inside dropped
        out = [w.rstrip(",;:") if i < len(out) - 1 else w for i, w in enumerate(out)]
    elif choice == 3:  # hyphens as dashes, "..." as the ellipsis character
        out = [w.replace("-", "\u2014").replace("...", "\u2026") for w in out]
    open_, close = rng.choice([("\u201c", "\u201d"), ('"', '"'), ("'", "'"), ("", "")])
    return [open_ + out[0], *out[1:-1], out[-1] + close] if len(out) > 1 else [open_ + out[0] + close]


def whitespace(words: list[str], rng: random.Random) -> list[str]:
    return [w + rng.choice(["", "", " ", "\n", "\t", "  "]) for w in words]


def elision(words: list[str], rng: random.Random) -> list[str] | None:
    """Drop a run of interior words; two or more words (not bare dashes or symbols) stay on each side."""
    real = [i for i, w in enumerate(words) if any(c.isalnum() for c in w)]
    if len(real) < 5:
        return None
    start = rng.randint(real[1] + 1, real[-3])
    after = [i for i in real if i >= start]
    stop = rng.randint(start + 1, after[-2])
    mark = rng.choice([" ...", " ... ", "...", "\u2026", " [...]"])
    return [*words[:start - 1], words[start - 1] + mark, *words[stop:]]


def mixed(words: list[str], rng: random.Random) -> list[str] | None:
    out: list[str] | None = words
    for step in rng.sample([cut_both, case, punctuation, whitespace, elision], k=rng.randint(2, 4)):
        out = step(out, rng) if out else None
    return out


ACCEPT: dict[str, Perturb] = {
    "exact span": lambda w, r: list(w),
    "cut mid-word at the start": cut_start,
    "cut mid-word at the end": cut_end,
    "cut mid-word at both ends": cut_both,
    "case": case,
    "punctuation, curly quotes": punctuation,
    "whitespace": whitespace,
    "... elision": elision,
    "mixed (2-4 of the above)": mixed,
}


def join(words: Sequence[str]) -> str:
    return " ".join(words)


def under_floor(quote: str, words: Sequence[str]) -> bool:
    """Whether the complete words of a quote of ``words`` (a fragment cut at either end not counted)
    hold fewer than 3 words and 12 characters: the floor below which a quote may not be cut."""
    got, full = match_key(quote.replace("...", " ")).split(), match_key(join(words)).split()
    if got:
        got = got[1 if got[0] != full[0] else 0: len(got) - (1 if got[-1] != full[-1] else 0)]
    return len(got) < 3 and len(" ".join(got)) < 12


# -- the corpus ---------------------------------------------------------------------------------------

class Corpus:
    def __init__(self, sessions: list[dict]) -> None:
        self.sessions = sessions
        self.keys = [[match_key(t["content"]) for t in s["turns"]] for s in sessions]
        self.normed = [[norm_quote(t["content"]) for t in s["turns"]] for s in sessions]
        self.vocab = sorted({w.strip(".,!?;:'\"()").lower() for s in sessions for t in s["turns"]
                             for w in t["content"].split()} - STOP - {""})
        self.vocab = [w for w in self.vocab if w.isalpha() and len(w) >= 3]

    def span(self, rng: random.Random, lo: int = 4, hi: int = 15) -> tuple[int, int, list[str]]:
        """A run of lo..hi words from a random turn: (session, turn, words)."""
        while True:
            s = rng.randrange(len(self.sessions))
            t = rng.randrange(len(self.sessions[s]["turns"]))
            words = self.sessions[s]["turns"][t]["content"].split()
            if len(words) < lo:
                continue
            n = rng.randint(lo, min(hi, len(words)))
            a = rng.randint(0, len(words) - n)
            return s, t, words[a:a + n]

    def grounds(self, session: int, quote: str, rule: str) -> bool:
        if rule == "baseline":
            return any(baseline_match(n, quote) for n in self.normed[session])
        match = new_match if rule == "new" else naive_match
        parts = quote_parts(quote)
        return any(match(k, parts) for k in self.keys[session])

    def in_session(self, session: int, quote: str) -> bool:
        """Whether the quote's parts occur in order in one turn of the session, boundaries and distance ignored.

        Such a quote is really said there (a new word that happens to make a sentence of the session, a splice
        that another turn says whole): it is no negative. Looser than either rule, so it does not favour one.
        """
        parts = quote_parts(quote)
        for key in self.keys[session]:
            at = 0
            for part in parts:
                at = key.find(part, at)
                if at < 0:
                    break
                at += len(part)
            else:
                return True
        return False


def content_positions(words: list[str]) -> list[int]:
    return [i for i, w in enumerate(words)
            if (core := w.strip(".,!?;:'\"()")).isalpha() and len(core) >= 3 and core.lower() not in STOP]


def substitute(corpus: Corpus, words: list[str], rng: random.Random) -> tuple[list[str], int] | None:
    """Replace one content word by another content word that is neither a prefix nor a suffix of it."""
    positions = content_positions(words)
    if not positions:
        return None
    i = rng.choice(positions)
    a, b = _alnum_span(words[i])
    old = words[i][a:b].lower()
    for _ in range(20):
        new = rng.choice(corpus.vocab)
        if new != old and not old.startswith(new) and not old.endswith(new) and not new.startswith(old):
            if words[i][a].isupper():
                new = new.capitalize()
            return [*words[:i], words[i][:a] + new + words[i][b:], *words[i + 1:]], i
    return None


FRAGMENT = "old word's fragment beside ..."


def substitution_variants(corpus: Corpus, words: list[str], rng: random.Random) -> dict[str, list[str] | None]:
    """One substituted span, as given and with each perturbation kept away from the new word."""
    sub = substitute(corpus, words, rng)
    if sub is None:
        return {}
    swapped, i = sub
    out: dict[str, list[str] | None] = {"substitution": swapped}
    out["substitution + case/punctuation/space"] = whitespace(punctuation(case(swapped, rng), rng), rng)
    if i > 0:
        out["substitution + cut at the other end"] = (
            cut_start(swapped, rng) if i == len(swapped) - 1 else cut_end(swapped, rng))
    if i >= 2:  # the elision right before the new word: "I adopted a ... poodle named Biscuit"
        out["substitution + ... right before it"] = [*swapped[:i - 1], swapped[i - 1] + " ...", *swapped[i:]]
    if i <= len(swapped) - 3:
        out["substitution + ... right after it"] = [*swapped[:i + 1], "...", *swapped[i + 2:]]
    far = [j for j in range(1, len(swapped) - 1) if abs(j - i) > 1]
    if far:  # an elision elsewhere drops one word, never the new one
        j = rng.choice(far)
        out["substitution + ... elsewhere"] = [*swapped[:j], "...", *swapped[j + 1:]]
    # The old word's own tail or head beside an elision: "a ... eagle" for "a beagle", "bea ... named".
    a, b = _alnum_span(words[i])
    spoken = [any(c.isalnum() for c in w) for w in words]
    if b - a >= 5 and any(spoken[:i]) and any(spoken[i + 1:]):  # real words on both sides of the elision
        k = rng.randint(a + 1, b - 3)
        tail = [*words[:i], "...", words[i][k:], *words[i + 1:]]
        head = [*words[:i], words[i][:b - (k - a)], "...", *words[i + 1:]]
        out[FRAGMENT] = rng.choice([tail, head])
    return out


def fabrications(corpus: Corpus, rng: random.Random) -> dict[str, tuple[int, str] | None]:
    s, t, words = corpus.span(rng, 6, 14)
    turns = corpus.sessions[s]["turns"]
    out: dict[str, tuple[int, str] | None] = {}
    other = rng.randrange(len(turns))
    o_words = turns[other]["content"].split()
    if other != t and len(o_words) >= 4:
        cut = rng.randint(2, len(words) - 2)
        k = rng.randint(2, min(8, len(o_words)))
        a = rng.randint(0, len(o_words) - k)
        tail = o_words[a:a + k]
        out["fabricated: two turns spliced"] = (s, join([*words[:cut], *tail]))
        out["fabricated: two turns spliced with ..."] = (s, join([*words[:cut], "...", *tail]))
    shuffled = list(words)
    rng.shuffle(shuffled)
    out["fabricated: words shuffled"] = (s, join(shuffled)) if shuffled != words else None
    names = sorted({x["name"] for x in turns})
    noun, noun2 = rng.sample(corpus.vocab, 2)
    template = rng.choice([
        "{n} said she adopted a {a} named {b} last week",
        "I finally quit my job at the {a} and moved to {b}",
        "{n} and I went to the {a} together to see the {b}",
        "My {a} is allergic to {b}, so we never go there",
        "I've been learning the {a} for three years now",
    ])
    out["fabricated: template sentence"] = (s, template.format(n=rng.choice(names), a=noun, b=noun2))
    return out


# -- the run ---------------------------------------------------------------------------------------------

RULES = ("new", "baseline", "naive")


def rate(hits: list[bool]) -> str:
    return f"{100 * sum(hits) / len(hits):6.2f} %" if hits else "     - "


def main() -> None:
    ap = argparse.ArgumentParser()
    figures.add_option(ap)
    ap.add_argument("--per-class", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="50 quotes a class, for the tests")
    args = ap.parse_args()
    if args.smoke:
        args.per_class = 50
    files = locomo_files()
    if not files:
        sys.exit("needs ../shared/data/locomo (LoCoMo, CC BY-NC 4.0, evaluation only)")
    corpus = Corpus([s for f in files for s in load_sessions(f)])
    rng = random.Random(args.seed)
    rows: dict[str, dict[str, list[bool]]] = {}

    def record(label: str, session: int, quote: str) -> None:
        row = rows.setdefault(label, {rule: [] for rule in RULES})
        for rule in RULES:
            row[rule].append(corpus.grounds(session, quote, rule))

    def negative(label: str, session: int, quote: str) -> bool:
        # The old word's fragment is in the turn by construction; what makes it a negative is the elision beside it.
        if label != FRAGMENT and corpus.in_session(session, quote):
            return False
        record(label, session, quote)
        return True

    short = "cut quote under the floor"
    accepted: dict[str, list[tuple[int, str]]] = {}
    for label, perturb in ACCEPT.items():
        made = 0
        while made < args.per_class:
            s, _, words = corpus.span(rng, 3, 15)
            out = perturb(words, rng)
            if not out:
                continue
            quote = join(out)
            if under_floor(quote, words):
                # A cut quote counts under its own label only when its complete words meet the floor.
                if len(rows.get(short, {}).get("new", [])) < args.per_class:
                    record(short, s, quote)
                continue
            record(label, s, quote)
            accepted.setdefault(label, []).append((s, quote))
            made += 1

    counts: dict[str, int] = {}
    for _ in range(100 * args.per_class):
        if len(counts) == 7 and min(counts.values()) >= args.per_class:
            break
        s, _, words = corpus.span(rng, 4, 15)
        for label, out in substitution_variants(corpus, words, rng).items():
            if out and counts.get(label, 0) < args.per_class:
                if negative(label, s, join(out)):
                    counts[label] = counts.get(label, 0) + 1

    made = 0
    for _ in range(100 * args.per_class):
        if made >= args.per_class:
            break
        src, _, words = corpus.span(rng, 4, 15)
        target = rng.randrange(len(corpus.sessions))
        if target == src:
            continue
        perturb = rng.choice([lambda w, r: list(w), case, punctuation, whitespace, cut_both, elision])
        out = perturb(words, rng)
        if out and negative("quote from another session", target, join(out)):
            made += 1

    counts = {}
    for _ in range(100 * args.per_class):
        if len(counts) == 4 and min(counts.values()) >= args.per_class:
            break
        for label, item in fabrications(corpus, rng).items():
            if item and counts.get(label, 0) < args.per_class:
                if negative(label, *item):
                    counts[label] = counts.get(label, 0) + 1

    n_turns = sum(len(s["turns"]) for s in corpus.sessions)
    print(f"grounding on {n_turns} LoCoMo turns in {len(corpus.sessions)} sessions, seed {args.seed}; "
          "a quote counts as grounded when it matches any turn of its session")
    print("  new rule: this module's; baseline: the rule before it (word boundaries everywhere, punctuation "
          "significant); naive: plain substrings of the parts, no boundaries or guards (for contrast)")
    print(f"  {'quote class':<46}{'n':>6}{'new rule':>11}{'baseline':>11}{'naive':>11}")

    def line(label: str, row: dict[str, list[bool]], indent: str = "    ") -> None:
        print(f"{indent}{label:<{48 - len(indent)}}{len(row['new']):>6}" + "".join(f"{rate(row[r]):>11}" for r in RULES))

    def section(title: str, labels: list[str], goal: str) -> list[bool]:
        print(f"  {title} ({goal})")
        pooled: dict[str, list[bool]] = {rule: [] for rule in RULES}
        for label in labels:
            for rule in RULES:
                pooled[rule] += rows[label][rule]
            line(label, rows[label])
        line("all of these", pooled)
        return pooled["new"]

    accept = section("accepted, verbatim as models quote", list(ACCEPT), "goal >= 99 %")
    reject_labels = [k for k in rows if k not in ACCEPT and k != short]
    reject = section("accepted, but must be rejected", reject_labels, "goal 0 %")
    line("by design: " + short, rows[short], "  ")
    ok_accept = sum(accept) / len(accept) >= 0.99
    ok_reject = not any(reject)
    print(f"  goal >= 99 % accepted: {'met' if ok_accept else 'NOT met'}; "
          f"goal 0 % false acceptance: {'met' if ok_reject else 'NOT met'}")
    stored_verbatim(corpus, accepted)


def stored_verbatim(corpus: Corpus, accepted: dict[str, list[tuple[int, str]]]) -> None:
    """Of the accepted quotes, the share whose stored source quote is the turn's own text (each part, between
    " … ", a substring of the turn it grounds in): stored as ``verbatim()`` gives it (now) beside the model's
    quote as written, the source quote stored before, each elision part taken on its own (same quotes)."""
    print("  stored source quote is the turn's own text (each part a substring of the turn it grounds in)")
    print(f"  {'quote class':<46}{'n':>6}{'verbatim':>11}{'as quoted':>11}")
    pooled: dict[str, list[bool]] = {"now": [], "before": []}
    for label, items in accepted.items():
        now, before = [], []
        for session, quote in items:
            parts = quote_parts(quote)
            turn = next((t["content"] for t, k in zip(corpus.sessions[session]["turns"], corpus.keys[session])
                         if new_match(k, parts)), None)
            if turn is None:
                continue  # the rule refused it (the rows above count those)
            now.append(all(p in turn for p in verbatim(quote, turn).split(" … ")))
            before.append(all(p.strip() in turn for p in re.split(r"\.{3,}|…", quote) if p.strip()))
        pooled["now"] += now
        pooled["before"] += before
        print(f"    {label:<44}{len(now):>6}{rate(now):>11}{rate(before):>11}")
    print(f"    {'all of these':<44}{len(pooled['now']):>6}{rate(pooled['now']):>11}{rate(pooled['before']):>11}")


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
