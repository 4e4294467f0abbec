"""The reflex's retrieval constants, measured on LoCoMo (see benchmarks/bench_reflex_recall.py).

The steps read them as ``tuning.NAME`` at call time, so the benchmark's ablations can switch
one part off by setting an attribute of this module.

Those ``bench_reflex_recall.py --ship`` chooses (its ``SHIPPED_CHOICE``: the BM25 and neighbour
constants, the kept methods' strengths, category instances, the gathering weights and the turn two
after a question) are what the procedure ``--loo`` reads held out chose on all four LoCoMo
conversations of ``../shared``; ``--ship --check`` exits 1 when a value here differs, and
``tests/test_reflex.py`` checks them against its record (docs/figures/bench_reflex_recall-ship.md).
The rest keep their hand-set values: the gates silence unrelated questions, which recall cannot
see, and the others change nothing under LoCoMo's protocol.
"""

from __future__ import annotations

__all__ = (
    "ANSWER_SHARE",
    "B",
    "CANDIDATES",
    "COMMON_DF_FLOOR",
    "CONTEXT_WEIGHT",
    "DATE_BOOST",
    "DIVERSIFY",
    "EXCHANGE_FILL",
    "EXCHANGE_REPLIES",
    "FUSE_DEPTH",
    "HOP_WEIGHT",
    "INSTANCE_CANDIDATES",
    "INSTANCE_CATEGORIES",
    "INSTANCE_TERMS",
    "INSTANCE_WEIGHT",
    "K1",
    "LIST_SPREAD",
    "MAX_DF_SHARE",
    "MAX_QUERY_TERMS",
    "MAX_TERMS",
    "MIN_WEIGHTING_TURNS",
    "MIN_COVERAGE",
    "NAMES_AS_SPEAKERS",
    "NEIGHBOUR_SHARE",
    "NEXT_SHARE",
    "NICKNAMES",
    "PRF_DOCS",
    "PRF_TERMS",
    "PRF_WEIGHT",
    "PRESENT_TENSE",
    "PER_TERM",
    "RECENCY_ANCHORS",
    "RECENCY_MIN_SHARED",
    "RECENCY_PER_ANCHOR",
    "RECENCY_PER_TERM",
    "RECENCY_TERMS",
    "RANKER",
    "RANKER_GATHERS",
    "RANKER_NAMED",
    "RELATIVE_GATE",
    "RRF_K",
    "SESSION_BOOST",
    "SESSION_LEND",
    "SLOT_WEIGHT",
    "SECOND_HOP",
    "SECOND_HOP_CANDIDATES",
    "SECOND_HOP_DOCS",
    "SECOND_HOP_TERMS",
    "SECOND_NEIGHBOUR_ASKS",
    "SECOND_NEIGHBOUR_SHARE",
    "SECOND_NEIGHBOUR_SIDE",
    "SESSION_SPREAD",
    "SPEAKER_BOOST",
    "SUBJECT_SPEAKER",
    "SYNOPSIS_CHARS",
    "TOPIC_WORDS",
    "UNSEEN_WEIGHTING_TURNS",
    "WHEN_BOOST",
)

CANDIDATES = 32          # turns fetched by the full-text query
MAX_TERMS = 10           # query terms kept, rarest first
MAX_DF_SHARE = 1.0       # terms in more than this share of turns are pruned from the full-text query (1.0: none)
COMMON_DF_FLOOR = 10     # ... but in a small store no word is common below this many turns
MIN_WEIGHTING_TURNS = 250  # IDF weights count a smaller namespace as this large: in a one-turn store
                           # the word it holds is not "too common" to matter beside an unknown word
UNSEEN_WEIGHTING_TURNS = 100_000  # ... and a word no turn holds weighs as in a namespace at most this large:
                           # its IDF, log(2n), would keep growing with the store and, through MIN_COVERAGE,
                           # silence more questions the larger it is (no namespace up to this size is affected)
MAX_QUERY_TERMS = 6      # of those, the rarest searched in the index
PER_TERM = 200           # newest matches read per term: bounds the cost of common terms
K1, B = 1.2, 0.4
NEIGHBOUR_SHARE = 0.4    # share of the previous turn's score a turn inherits (it may answer it)
NEXT_SHARE = 0.4         # share of the next turn's score a turn inherits
SPEAKER_BOOST = 0.5      # relative boost for a turn spoken by a person the query names
MIN_COVERAGE = 0.20      # share of the query's weight a pointer (with its neighbour) must match
SYNOPSIS_CHARS = 300
RRF_K = 60
FUSE_DEPTH = 24          # ranks of each list that take part in the fusion
RELATIVE_GATE = 0.2      # drop turns scoring under this share of the best one
CONTEXT_WEIGHT = 0.4     # weight of terms only in the earlier user turn (a short follow-up's topic)
HOP_WEIGHT = 0.5         # rank-fusion weight of memories reached one hop through an entity
NAMES_AS_SPEAKERS = False  # a name the turns' speakers carry is a speaker signal, not a content term
WHEN_BOOST = 0.4         # a 'when' question prefers turns that say when
DIVERSIFY = False        # a turn does not inherit the score of a neighbour already chosen
PRESENT_TENSE = True     # 'now', 'these days', 'still'...: later follow-ups of the top turns go first
RECENCY_ANCHORS = 3      # present tense: the top turns whose later follow-ups go before them
TOPIC_WORDS = 10         # words of those turns whose frequency is looked up (each costs a postings walk)
RECENCY_TERMS = 6        # distinctive words of those turns searched for follow-ups in later sessions
RECENCY_PER_TERM = 50    # newest matches read per word in that search
RECENCY_MIN_SHARED = 2   # words a later turn must share with a top turn to follow it up
RECENCY_PER_ANCHOR = 2   # follow-ups placed before each top turn
# Issue 16: methods tried with benchmarks/bench_reflex_recall.py --cross --ablations; only those that
# improved both cross directions are on (ANSWER_SHARE, SESSION_BOOST, DATE_BOOST, EXCHANGE_REPLIES; see the README's ablation
# table). The others stay switchable, at off, so the table can be re-measured.
PRF_TERMS = 0            # off: pseudo-relevance feedback, words of the top turns added to the query
PRF_DOCS = 1             # ... taken from this many top-ranked turns
PRF_WEIGHT = 0.1         # ... the heaviest at this share of the weight of the query's strongest term
SESSION_BOOST = 0.2      # relative lift for a turn by the share of the query's weight its session's turns cover
SESSION_SPREAD = 0.0     # off: a turn loses this share of its score per turn of its session already chosen
DATE_BOOST = 1.0         # a question naming a date lifts turns of sessions held on (or just after) it,
                         # and those sessions match the date's words (query.date_words)
NICKNAMES = False        # off: a query word that starts one speaker's name ("Mel") is that speaker
ANSWER_SHARE = 1.0       # a turn inherits this much more of its previous turn's score when that turn asks a question
SUBJECT_SPEAKER = False  # off: of two speakers a question names, only its subject ("what did Jon tell Gina") speaks
EXCHANGE_REPLIES = True   # in the block's top half, a turn that asks about the query's words brings its reply
EXCHANGE_FILL = False     # off: a block shorter than its places is filled with the turns next to its turns
RANKER_GATHERS = True     # the ranker's own weights for a question that gathers (ranker.gathers); off, they read 0
RANKER_NAMED = False      # off: the ranker's features for the specific things a turn names (ranker.FEATURES "named") read 0;
                          # on, --loo read 0.731 mean against 0.730 without, pooled 0.719 against 0.720, multi-hop
                          # 0.395 against 0.400 (conv-42 lost a question and a half): not kept
RANKER = True             # the learnt order of ranker.json (benchmarks/train_reflex_ranker.py) replaces the hand-set one
SLOT_WEIGHT = 0.4         # a present-tense question naming a kind of fact (slots.SLOTS) also seeks that kind's other words, at this share
INSTANCE_WEIGHT = 1.0     # a category a listing question names ("activities") also seeks its instances ("hiking"), at this share
INSTANCE_CATEGORIES = 2   # ... of at most this many categories (the heaviest words)
INSTANCE_TERMS = 8        # ... at most this many instances the namespace holds, rarest first
INSTANCE_CANDIDATES = 16  # ... turns read for them (with their neighbours), in one more full-text read
LIST_SPREAD = 0.0         # off: with the ranker, a listing question's turn loses this share per turn of its session placed before it
# Issue 25: a second hop. The first pass's top turns name things the question did not ("home country",
# a friend's name); their distinctive words are read once more, so turns that say the rest join.
SECOND_HOP = 0.0          # off: weight of those words (of the lesser of their IDF and the question's heaviest word)
SECOND_HOP_DOCS = 3       # ... taken from this many top turns of the first pass
SECOND_HOP_TERMS = 4      # ... at most this many words (names first, rarest first; in 2 turns at least)
SECOND_HOP_CANDIDATES = 16  # ... turns read for them (with their neighbours), in one more full-text read
# Issue 25: the turn two after a candidate (in a two-party exchange, the same speaker's turn across the
# other's question: "I took the kids to the museum" / "What did they like?" / "The dinosaurs!") joins the
# pool and inherits a share of its score, as the next turns do.
SECOND_NEIGHBOUR_SHARE = 0.3  # the share a turn inherits of the turn two before it (0: off)
SECOND_NEIGHBOUR_SIDE = "after"  # with it on, only the turn two after a candidate joins ("both": two before too)
SECOND_NEIGHBOUR_ASKS = True     # ... and only across a turn that asks (a question mark in the turn between)
# Issue 25: session-level evidence as a score. A session one of whose turns matches the question well
# holds the rest of what it asks about more often than another ("activities": the hike and the pottery).
SESSION_LEND = 0.0        # off: a turn that matches a question word inherits this share of its session's best own score
