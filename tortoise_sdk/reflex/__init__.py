"""The reflex: a bounded, relevant, safely framed memory block before each host turn.

Deterministic, read-only, no model call. ``context()`` never raises: a failure or a
time-budget overrun returns an empty block whose ``degraded_reason`` says why.

Pipeline, each step one batched store read:

1. **Query** from the last user turn (plus the one before when the last is short); a
   courtesy turn ("thanks!", "hi") fires nothing.
2. **Term weighting**: query terms are analysed with the index's own tokenizer (porter
   stems), weighted by inverse document frequency; very common terms are pruned from the
   full-text query (they cost time and add noise), speaker names become a speaker signal.
3. **Candidates**: an FTS5 OR-query over turn content, then the neighbouring turns of
   every candidate in one read; memories (when the store has them) by full text, by entity
   and by one hop through the entities of the matched memories.
4. **Scoring**: BM25 with the weights above, plus a share of the best neighbouring turn's
   score (an answer often sits in the reply to the turn that names the topic; a reply to a
   turn that asks takes a larger share), a boost for turns spoken by a person the query
   names and a lift for turns of sessions whose turns between them cover more of the query;
   lists fused by reciprocal rank. Identical texts keep one slot. Pseudo-relevance feedback
   (``feedback``: the best turns' distinctive words join the query) is there but off: it did
   not hold on a conversation its constants were not chosen on. A present-tense question
   ("now", "these days", "still") puts the later turns that follow up the top turns, and say
   what changed, before them.
5. **Gate** on the share of the query's weight a candidate (with its neighbour) covers, the
   **prior-mention rule**, then the **budget** (pointers and tokens) and the **frame**.

One module per step: ``query`` (1-2), ``candidates`` (3), ``scoring`` (4 and the gates), ``feedback``,
``prior`` (the prior-mention rule), ``render`` (budget, frame), ``escape`` (what every stored
field becomes in the block), ``expand``; ``run`` drives them under the time budget, ``tuning``
holds the measured constants.

Tokens are counted with ``approx_tokens`` unless the caller passes ``token_counter``: a
deterministic estimate from runs of letters, digits and symbols that stays above what the
cl100k/o200k tokenizers count on natural text (real/estimate at most 0.85 on the LoCoMo
blocks), with no litellm import and no tokenizer load on the hot path. Pass e.g.
``lambda s: litellm.token_counter(model=m, text=s)`` for the configured model's exact count.
"""

from __future__ import annotations

from ..models import MEMORY_BLOCK_END
from .expand import expand
from .run import DEFAULT_BUDGET, DEFAULT_MAX_TOKENS, DEFAULT_TIME_BUDGET_MS, MAX_BUDGET, context
from .tokens import TokenCounter, approx_tokens

__all__ = (
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIME_BUDGET_MS",
    "MAX_BUDGET",
    "MEMORY_BLOCK_END",
    "TokenCounter",
    "approx_tokens",
    "context",
    "expand",
)
