"""The background embedding step: vectors for the turns and memories that have none under the embedder's model.

Never run by ``capture``: by ``Memory.embed_pending``, which ``flush``, ``tortoise worker`` and
``tortoise embed --backfill`` call. A changed model leaves every row without a vector under it,
so the same step re-embeds the namespace.
"""

from __future__ import annotations

from ..errors import ModelError
from ..llm.embedder import DEFAULT_EMBED_BATCH, Embedder
from ..models import EmbedReport, StageStats
from ..store.base import Store

__all__ = ("embed_pending",)


def embed_pending(store: Store, namespace: str, embedder: Embedder, *, limit: int | None = None,
                  batch_size: int = DEFAULT_EMBED_BATCH) -> EmbedReport:
    """Embed up to ``limit`` waiting items (all with None), ``batch_size`` texts per request.

    An embedder failure stops the run and is reported (``error``), never raised: what was
    stored stays, the rest waits for the next run.
    """
    report = EmbedReport(model=embedder.model)
    before = embedder.stats
    after = None
    while limit is None or report.embedded < limit:
        want = batch_size if limit is None else min(batch_size, limit - report.embedded)
        items = store.pending_embeddings(namespace, embedder.model, want, after=after)
        if not items:
            break
        after = (items[-1][0], items[-1][1])
        try:
            vectors = embedder.embed([text for _, _, text in items])
        except ModelError as exc:
            report.error = str(exc)
            break
        report.dim = len(vectors[0])
        report.embedded += store.save_vectors(
            namespace, embedder.model, [(kind, item_id, v) for (kind, item_id, _), v in zip(items, vectors)])
    report.more = bool(store.pending_embeddings(namespace, embedder.model, 1))
    report.usage = _delta(before, embedder.stats) if embedder.is_model else None
    return report


def _delta(before: StageStats, after: StageStats) -> StageStats:
    def minus(a: float | None, b: float | None) -> float | None:
        return None if a is None else a - (b or 0)

    return StageStats(
        calls=after.calls - before.calls, retries=after.retries - before.retries,
        prompt_tokens=minus(after.prompt_tokens, before.prompt_tokens),  # type: ignore[arg-type]
        completion_tokens=minus(after.completion_tokens, before.completion_tokens),  # type: ignore[arg-type]
        cost_usd=minus(after.cost_usd, before.cost_usd), wall_ms=after.wall_ms - before.wall_ms,
        errors={k: v - before.errors.get(k, 0) for k, v in after.errors.items() if v - before.errors.get(k, 0)})
