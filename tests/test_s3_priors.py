"""S3 on both engines: the priors S4 sees come from the candidates and from S1's story."""

from __future__ import annotations

import uuid

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.models import ExtractionReport
from tortoise_sdk.pipeline.merge import Proposal, coerce_proposal
from tortoise_sdk.pipeline.s3_priors import find_priors
from tortoise_sdk.store import Store
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, ItemPlan, SourcePlan


def _stored(store: Store) -> str:
    ns = f"ns_{uuid.uuid4().hex[:12]}"
    r = store.capture(ns, prepare_capture("s1", [{"role": "user", "content": "Mel took up pottery"}], max_turns=5))
    store.write_extraction(ns, ExtractionPlan(
        session_id="s1", extraction_id="x_1", valid_at=None, entities=[EntityPlan("Melanie Hart", "person"), EntityPlan("Mel", "person")],
        items=[ItemPlan("point", "Melanie Hart goes to a pottery class on Tuesdays", about=("Melanie Hart",),
                        sources=(SourcePlan(r.turn_ids[0], None),))]),
        finalize=lambda res: ExtractionReport(status="ok"))
    return ns


def test_the_story_finds_priors_the_items_word_differently(store: Store):
    ns = _stored(store)
    proposal, _ = coerce_proposal({"points": [{"content": "The user's wife makes bowls", "quote": "bowls", "turn": 0}]},
                                  stage="s2")
    assert find_priors(store, ns, proposal).memories == []
    story = "The user says Mel has been at her pottery class again and brought home two bowls."
    priors = find_priors(store, ns, proposal, story=story)
    assert [m.content for m in priors.memories] == ["Melanie Hart goes to a pottery class on Tuesdays"]
    # "Mel" in the story is the known Melanie Hart (an alias), so S4 sees her as a known entity
    assert [e["name"] for e in priors.entities] == ["Melanie Hart"]
    assert find_priors(store, ns, Proposal(), story="").memories == []
