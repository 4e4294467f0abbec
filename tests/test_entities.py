"""Entity resolution on both engines: short forms, roles, the host's merges and splits, and order independence."""

from __future__ import annotations

import uuid
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tortoise_sdk.capture import prepare_capture
from tortoise_sdk.errors import InvalidInput, NotFoundError
from tortoise_sdk.memory import Memory
from tortoise_sdk.models import ExtractionReport, utc_now
from tortoise_sdk.names import entities_named, role_key, role_statements, short_form_of
from tortoise_sdk.store import Store
from tortoise_sdk.store.plan import EntityPlan, ExtractionPlan, ItemPlan, SourcePlan


def _finalize(result):
    return ExtractionReport(status="ok", counts=dict(result.counts), outcomes=dict(result.outcomes))


def _ns() -> str:
    return f"ns_{uuid.uuid4().hex[:12]}"


def _turn(store: Store, ns: str, text: str = "a turn", session: str = "s1") -> str:
    turn = {"role": "user", "content": text, "id": uuid.uuid4().hex}
    return store.capture(ns, prepare_capture(session, [turn], max_turns=10, idempotency_key=None)).turn_ids[0]


def fact(name: str) -> str:
    """A fact of its own for each spelling (the same words about one person would be one restated fact)."""
    return f"fact {zlib.crc32(name.encode())} about {name}"


def _say(store: Store, ns: str, name: str, content: str | None = None, *, kind: str = "person",
         about: tuple[str, ...] | None = None, note: str | None = None, session: str = "s1") -> None:
    """One extraction naming ``name`` (an entity of ``kind``) in one memory about it."""
    t = _turn(store, ns, content or name, session)
    plan = ExtractionPlan(session_id=session, extraction_id=f"x_{uuid.uuid4().hex[:8]}", valid_at=None,
                          entities=[EntityPlan(name, kind, note)],
                          items=[ItemPlan("point", content or fact(name), about=about or (name,),
                                          sources=(SourcePlan(t, None),))])
    store.write_extraction(ns, plan, finalize=_finalize)


def _about(store: Store, ns: str) -> dict[str, str]:
    """Each live memory's content -> the name of the entity it is about."""
    return {m.content: ", ".join(m.entities) for m in store.memories(ns)}


# -- the rules ---------------------------------------------------------------------------------------


def test_short_forms_nicknames_and_roles():
    assert short_form_of("mel", "melanie hart") and short_form_of("bob", "robert stone")
    assert short_form_of("melanie", "melanie hart") and short_form_of("mel hart", "melanie hart")
    assert not short_form_of("me", "melanie") and not short_form_of("ray", "caroline ray")
    assert not short_form_of("melanie hart", "melanie hart") and not short_form_of("mel stone", "melanie hart")
    assert role_key("my wife") == role_key("the user's wife") == role_key("Wife") == "user's wife"
    assert role_key("Sam's mom") == role_key("sam's mother") == "sam's mother"
    assert role_key("Melanie") is None
    assert role_statements("Melanie is the user's wife", ["Melanie"]) == [("Melanie", "user's wife")]
    assert role_statements("My wife Melanie paints", ["Melanie"]) == [("Melanie", "user's wife")]
    assert role_statements("Melanie loves her wife", ["Melanie"]) == []


# -- resolution at write time -------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["full first", "short first"])
def test_a_nickname_or_clipped_name_is_the_one_person_it_can_be_in_either_order(store: Store, order):
    ns = _ns()
    names = ["Melanie Hart", "Mel", "Bob", "Robert Stone"]
    for name in (names if order == "full first" else names[::-1]):
        _say(store, ns, name)
    ents = {e["name"]: e for e in store.entities(ns)}
    assert sorted(ents) == ["Melanie Hart", "Robert Stone"]
    assert {a["name"]: a["how"] for a in ents["Melanie Hart"]["aliases"]} == {"Mel": "clipped name"}
    assert {a["name"]: a["how"] for a in ents["Robert Stone"]["aliases"]} == {"Bob": "nickname"}
    assert _about(store, ns) == {fact("Melanie Hart"): "Melanie Hart", fact("Mel"): "Melanie Hart",
                                 fact("Bob"): "Robert Stone", fact("Robert Stone"): "Robert Stone"}
    # the block's and S3's reads find her by the nickname too
    assert [e["name"] for e in store.find_entities(ns, ["mel"])] == ["Melanie Hart"]
    assert len(store.memories_about(ns, ["mel"], k=5)) == 2
    assert {m.content for m, _ in store.search_memories(ns, '"mel"', k=5)} == {fact("Melanie Hart"), fact("Mel")}


def test_a_short_form_two_people_share_stays_its_own(store: Store):
    ns = _ns()
    for name in ("Melanie Hart", "Melvin Ross", "Mel"):
        _say(store, ns, name)
    assert sorted(e["name"] for e in store.entities(ns)) == ["Mel", "Melanie Hart", "Melvin Ross"]


@pytest.mark.parametrize("order", ["role stated first", "role used first"])
def test_my_wife_is_the_person_named_as_wife_with_the_evidence(store: Store, order):
    ns = _ns()
    steps = [lambda: _say(store, ns, "Melanie", "Melanie is the user's wife"),
             lambda: _say(store, ns, "my wife", "my wife loves pottery")]
    for step in (steps if order == "role stated first" else steps[::-1]):
        step()
    [melanie] = store.entities(ns)
    assert melanie["name"] == "Melanie"
    role = next(a for a in melanie["aliases"] if a["how"] == "role")
    assert (role["name"], role["evidence"]) == ("user's wife", "Melanie is the user's wife")
    assert _about(store, ns) == {"Melanie is the user's wife": "Melanie", "my wife loves pottery": "Melanie"}
    # another namespace knows no wife
    other = _ns()
    _say(store, other, "my wife", "my wife loves pottery")
    assert [e["name"] for e in store.entities(other)] == ["my wife"]


def test_an_entity_note_names_a_role(store: Store):
    ns = _ns()
    _say(store, ns, "Robert Stone", note="the user's father")
    _say(store, ns, "dad", "dad fixed the boat")
    assert _about(store, ns)["dad fixed the boat"] == "Robert Stone"


# -- the host corrects --------------------------------------------------------------------------------


def test_merge_then_split_keeps_provenance(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie Hart")
    _say(store, ns, "Lanie", "Lanie paints")
    assert sorted(e["name"] for e in store.entities(ns)) == ["Lanie", "Melanie Hart"]
    lanie_id = next(e["id"] for e in store.entities(ns) if e["name"] == "Lanie")
    kept = store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())
    assert kept["name"] == "Melanie Hart" and [a["name"] for a in kept["aliases"]] == ["Lanie"]
    assert _about(store, ns) == {fact("Melanie Hart"): "Melanie Hart", "Lanie paints": "Melanie Hart"}
    _say(store, ns, "Lanie", "Lanie sings")  # the merged name now resolves to her
    assert _about(store, ns)["Lanie sings"] == "Melanie Hart"
    [merge] = store.entity_events(ns)
    assert (merge["kind"], merge["entity_id"], merge["other_id"]) == ("merge", kept["id"], lanie_id)
    assert merge["detail"]["name"] == "Lanie" and len(merge["detail"]["memory_ids"]) == 1
    with pytest.raises(InvalidInput):
        store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())

    split = store.split_entity(ns, "Melanie Hart", "Lanie", now=utc_now())
    assert split["name"] == "Lanie"
    assert _about(store, ns) == {fact("Melanie Hart"): "Melanie Hart", "Lanie paints": "Lanie",
                                 "Lanie sings": "Lanie"}
    assert [e["kind"] for e in store.entity_events(ns)] == ["merge", "split"]
    # kept apart for good: neither the name nor a short form goes back to her
    _say(store, ns, "Lanie", "Lanie dances")
    assert _about(store, ns)["Lanie dances"] == "Lanie"
    with pytest.raises(InvalidInput):
        store.split_entity(ns, "Melanie Hart", "Melanie Hart", now=utc_now())
    with pytest.raises(NotFoundError):
        store.merge_entities(ns, "Melanie Hart", "Nobody", now=utc_now())


def test_a_memory_naming_both_keeps_both_after_a_merge_and_its_split(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie Hart")
    _say(store, ns, "Lanie", "Lanie paints")
    _say(store, ns, "Lanie", "Melanie Hart and Lanie went hiking", about=("Melanie Hart", "Lanie"))
    store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())
    assert _about(store, ns)["Melanie Hart and Lanie went hiking"] == "Melanie Hart"
    store.split_entity(ns, "Melanie Hart", "Lanie", now=utc_now())
    # the memory named both before the merge, so it names both again (before: only Lanie; Melanie lost it)
    assert sorted(_about(store, ns)["Melanie Hart and Lanie went hiking"].split(", ")) == ["Lanie", "Melanie Hart"]
    assert _about(store, ns)["Lanie paints"] == "Lanie"
    assert _about(store, ns)[fact("Melanie Hart")] == "Melanie Hart"


def test_a_split_takes_back_the_note_its_merge_brought(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie Hart")
    _say(store, ns, "Lanie", "Lanie paints", note="a painter from the pottery class")
    assert store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())["note"] == "a painter from the pottery class"
    lanie = store.split_entity(ns, "Melanie Hart", "Lanie", now=utc_now())
    assert lanie["note"] == "a painter from the pottery class"
    assert {e["name"]: e["note"] for e in store.entities(ns)}["Melanie Hart"] is None


def _notes(store: Store, ns: str) -> dict[str, str | None]:
    return {e["name"]: e["note"] for e in store.entities(ns)}


def test_forgetting_the_session_that_wrote_a_note_takes_the_note_and_the_role_it_named(store: Store):
    """A note carried no provenance: forgetting the session whose extraction wrote it left its words on an entity
    other sessions still name."""
    ns = _ns()
    _say(store, ns, "Robert Stone", "Robert Stone fixed the boat", session="s1")
    _say(store, ns, "Robert Stone", "Robert Stone is in rehab", note="the user's father, in rehab", session="s2")
    _say(store, ns, "Anna", "Anna bakes", note="a neighbour who bakes", session="s1")
    assert _notes(store, ns) == {"Robert Stone": "the user's father, in rehab", "Anna": "a neighbour who bakes"}
    store.forget_session(ns, "s2")
    assert _notes(store, ns) == {"Robert Stone": None, "Anna": "a neighbour who bakes"}  # s1's note stays
    [robert] = [e for e in store.entities(ns) if e["name"] == "Robert Stone"]
    assert robert["aliases"] == []  # "dad", named by the note, went with it
    _say(store, ns, "Robert Stone", "Robert Stone sails", note="a sailor", session="s3")
    assert _notes(store, ns)["Robert Stone"] == "a sailor"  # a later session's note takes the free place


def test_forgetting_the_session_of_a_note_a_merge_carried_takes_it_from_the_merge_record_too(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie Hart", session="s1")
    _say(store, ns, "Lanie", "Lanie sings", session="s3")
    _say(store, ns, "Lanie", "Lanie paints", note="a painter from the pottery class", session="s2")
    assert store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())["note"] == "a painter from the pottery class"
    painted = next(m.id for m in store.memories(ns) if m.content == "Lanie paints")
    assert painted in str(store.entity_events(ns))
    store.forget_session(ns, "s2")
    assert _notes(store, ns) == {"Melanie Hart": None}
    assert "pottery" not in str(store.entity_events(ns))
    assert painted not in str(store.entity_events(ns))  # nor the id of the memory it brought (a hash of its fact)
    assert store.split_entity(ns, "Melanie Hart", "Lanie", now=utc_now())["note"] is None  # not brought back


def test_split_takes_a_wrongly_resolved_short_form_out(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie Hart")
    _say(store, ns, "Mel", "Mel fixed the sink")  # a plumber, not Melanie
    mel = store.split_entity(ns, "Melanie Hart", "Mel", now=utc_now())
    assert _about(store, ns) == {fact("Melanie Hart"): "Melanie Hart", "Mel fixed the sink": "Mel"}
    _say(store, ns, "Mel", "Mel fixed the roof")
    assert _about(store, ns)["Mel fixed the roof"] == "Mel"
    assert mel["id"] in {e["id"] for e in store.entities(ns)}


def test_a_second_person_sharing_a_claimed_first_name_gets_an_entity_of_its_own(store: Store):
    # "Anna" was created, then renamed "Anna Smith" when the full name came: its id is the hash of "anna".
    # A second Anna makes the bare first name ambiguous, so "Anna" is an entity of its own again: it
    # must not take the id the renamed one still holds (it did: UNIQUE constraint, every later write refused).
    ns = _ns()
    for name in ("Anna", "Anna Smith", "Anna Jones", "Anna"):
        _say(store, ns, name, f"{name} said hello {uuid.uuid4().hex[:6]}")
    names = sorted(e["name"] for e in store.entities(ns))
    assert names == ["Anna", "Anna Jones", "Anna Smith"]
    assert len({e["id"] for e in store.entities(ns)}) == 3
    _say(store, ns, "Anna Smith", "Anna Smith runs")  # later writes still land
    assert _about(store, ns)["Anna Smith runs"] == "Anna Smith"


def test_splitting_the_first_name_an_entity_was_created_under_gives_it_a_new_entity(store: Store):
    # the docs' example: "Mel" first, then "Melanie Hart" claims her; the host says Mel was someone else
    ns = _ns()
    _say(store, ns, "Mel", "Mel fixed the sink")
    _say(store, ns, "Melanie Hart")
    [melanie] = store.entities(ns)
    mel = store.split_entity(ns, "Melanie Hart", "Mel", now=utc_now())
    assert mel["id"] != melanie["id"] and mel["name"] == "Mel"
    assert _about(store, ns) == {fact("Melanie Hart"): "Melanie Hart", "Mel fixed the sink": "Mel"}
    assert sorted(e["name"] for e in store.entities(ns)) == ["Mel", "Melanie Hart"]


def test_splitting_a_name_an_entity_of_its_own_already_has_moves_the_memories_to_it(store: Store):
    # "Mel" resolved to Melanie Hart, then Melvin came and a later "Mel" became an entity of its own:
    # splitting "Mel" out of Melanie moves her Mel memory to that entity (it failed on the unique name)
    ns = _ns()
    _say(store, ns, "Melanie Hart")
    _say(store, ns, "Mel", "Mel loves tea")
    _say(store, ns, "Melvin Ross")
    _say(store, ns, "Mel", "Mel fixed the sink")
    mel = next(e for e in store.entities(ns) if e["name"] == "Mel")
    assert store.split_entity(ns, "Melanie Hart", "Mel", now=utc_now())["id"] == mel["id"]
    assert _about(store, ns)["Mel loves tea"] == "Mel" and _about(store, ns)["Mel fixed the sink"] == "Mel"
    assert sorted(e["name"] for e in store.entities(ns)) == ["Mel", "Melanie Hart", "Melvin Ross"]


def test_memory_merge_and_split_and_the_graph_use_the_resolved_entity(tmp_path):
    mem = Memory(str(tmp_path / "m.db"))
    _say(mem.store, mem.namespace, "Melanie Hart")
    _say(mem.store, mem.namespace, "Mel", "Mel loves painting")
    g = mem.graph()
    entity_nodes = [n for n, d in g.nodes(data=True) if d.get("kind") == "entity"]
    assert [g.nodes[n]["name"] for n in entity_nodes] == ["Melanie Hart"]
    assert g.nodes[entity_nodes[0]]["aliases"] == ["Mel"]  # the export holds the other names too
    assert sum(1 for _, v, d in g.edges(data=True) if v == entity_nodes[0]) == 2
    _say(mem.store, mem.namespace, "Lanie", "Lanie sings")
    assert mem.merge_entities("Mel", "Lanie")["name"] == "Melanie Hart"
    assert mem.split_entity("Melanie Hart", "Lanie")["name"] == "Lanie"
    assert [e["kind"] for e in mem.entity_events()] == ["merge", "split"]
    mem.close()


def test_forgetting_takes_an_entity_s_names_along(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie", "Melanie is the user's wife")
    mid = store.memories(ns)[0].id
    store.forget_memory(ns, mid)
    assert store.entities(ns) == []
    _say(store, ns, "my wife", "my wife loves pottery")
    assert [e["name"] for e in store.entities(ns)] == ["my wife"]  # the role went with the memory that stated it


def test_forgetting_the_session_that_said_a_full_name_takes_the_name_back_out(store: Store):
    # "Mel" (session a), then "Melanie Hart" (session b) renamed her. Forgetting b leaves no trace of the
    # name only b said: she is "Mel" again (before: still "Melanie Hart", the forgotten session's words).
    ns = _ns()
    _say(store, ns, "Mel", "Mel fixed the sink", session="a")
    _say(store, ns, "Melanie Hart", session="b")
    assert [e["name"] for e in store.entities(ns)] == ["Melanie Hart"]
    store.forget_session(ns, "b")
    assert [(e["name"], e["aliases"]) for e in store.entities(ns)] == [("Mel", [])]
    assert _about(store, ns) == {"Mel fixed the sink": "Mel"}
    with store.read() as c:
        for table in ("entity_aliases", "memories", "entities"):
            rows = c.execute(f"SELECT * FROM {table} WHERE namespace = {store.PARAM}", (ns,)).fetchall()
            assert "hart" not in repr(rows).lower()
    assert store.search_memories(ns, '"hart"', k=5) == [] and len(store.search_memories(ns, '"mel"', k=5)) == 1
    # a name a surviving session used stays: forgetting a leaves Melanie Hart as b named her
    other = _ns()
    _say(store, other, "Mel", "Mel fixed the sink", session="a")
    _say(store, other, "Melanie Hart", session="b")
    store.forget_session(other, "a")
    assert [(e["name"], e["aliases"]) for e in store.entities(other)] == [("Melanie Hart", [])]
    # an alias first resolved in the forgotten session stays while another session's memory uses it
    third = _ns()
    _say(store, third, "Melanie Hart", session="a")
    _say(store, third, "Mel", "Mel fixed the sink", session="b")
    _say(store, third, "Mel", "Mel fixed the roof", session="c")
    store.forget_session(third, "b")
    [melanie] = store.entities(third)
    assert [(a["name"], a["how"]) for a in melanie["aliases"]] == [("Mel", "clipped name")]
    assert _about(store, third) == {fact("Melanie Hart"): "Melanie Hart", "Mel fixed the roof": "Melanie Hart"}


def test_forgetting_renames_after_the_entities_it_removes_and_never_keeps_a_forgotten_name(store: Store):
    # the surviving "Anna" is Anna Jones's first name; the bare "Anna" entity the same forgetting removes no
    # longer holds the name, so she is "Anna" again (she kept "Anna Jones", the forgotten session's words)
    ns = _ns()
    for name, session in (("Anna Jones", "x"), ("Anna", "keep"), ("Anna Smith", "x"), ("Anna", "x")):
        _say(store, ns, name, f"{name} plays the cello {session}", session=session)
    store.forget_session(ns, "x")
    assert [e["name"] for e in store.entities(ns)] == ["Anna"]
    assert store.search_memories(ns, '"jones"', k=5) == []
    # where another entity has the surviving name, she is numbered rather than left with the forgotten one
    other = _ns()
    for name, session in (("Melanie Hart", "b"), ("Mel", "a"), ("Melvin Ross", "a"), ("Mel", "a")):
        _say(store, other, name, f"{name} fixed the sink {session}", session=session)
    store.forget_session(other, "b")
    assert sorted(e["name"] for e in store.entities(other)) == ["Mel", "Mel (2)", "Melvin Ross"]
    assert store.search_memories(other, '"hart"', k=5) == []


def test_a_split_of_a_name_forgetting_took_away_is_refused(store: Store):
    # Lanie (session b) was merged into Melanie, then b was forgotten: "Lanie" is no name of hers any more, so a
    # split finds nothing to take out (it made an entity "Lanie" with no memory, from the merge's old record)
    ns = _ns()
    _say(store, ns, "Melanie Hart", session="a")
    _say(store, ns, "Lanie", "Lanie paints", session="b")
    store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())
    store.forget_session(ns, "b")
    with pytest.raises(InvalidInput):
        store.split_entity(ns, "Melanie Hart", "Lanie", now=utc_now())
    assert [e["name"] for e in store.entities(ns)] == ["Melanie Hart"]


# -- correct_memory re-links ----------------------------------------------------------------------------


def test_correct_memory_links_the_entities_of_the_new_text(tmp_path):
    mem = Memory(str(tmp_path / "m.db"))
    _say(mem.store, mem.namespace, "Caroline Diaz")
    first = mem.remember("Melanie adopted a cat", about=["Melanie"])
    assert first.entities == ["Melanie"]
    fixed = mem.correct_memory(first.id, "Caroline adopted a cat")
    assert fixed.entities == ["Caroline Diaz"]  # her first name; Melanie is not in the new text
    assert mem.memory_history(fixed.id)[0].entities == ["Melanie"]  # the old version keeps its own
    again = mem.correct_memory(fixed.id, "Caroline and Sam adopted a cat", about=["Caroline Diaz", "Sam"])
    assert again.entities == ["Caroline Diaz", "Sam"]
    mem.close()


def test_entities_named_finds_names_aliases_and_roles():
    ents = [{"name": "Melanie Hart", "kind": "person",
             "aliases": [{"name": "Mel", "how": "clipped name"}, {"name": "user's wife", "how": "role"}]},
            {"name": "Paris", "kind": "place", "aliases": []}]
    assert entities_named("Mel moved to Paris", ents) == ["Melanie Hart", "Paris"]
    assert entities_named("My wife paints", ents) == ["Melanie Hart"]
    assert entities_named("Melanie paints", ents) == ["Melanie Hart"]
    assert entities_named("Melvin paints", ents) == []


# -- order and duplication do not matter ----------------------------------------------------------------

#: Mentions of three people and a place, none of whose short forms could be another's.
_MENTIONS = [
    ("Melanie Hart", None), ("Melanie", None), ("Mel", None), ("my wife", None),
    ("Melanie", "Melanie is the user's wife"),
    ("Robert Stone", None), ("Robert", None), ("Bob", None), ("Rob", None),
    ("Caroline Diaz", None), ("Caro", None),
    ("Paris", None),
]


def _partition(store: Store, ns: str) -> set[tuple[str, frozenset[str]]]:
    by: dict[str, set[str]] = {}
    for content, name in _about(store, ns).items():
        by.setdefault(name, set()).add(content)
    return {(name, frozenset(contents)) for name, contents in by.items()}


def _replay(store: Store, mentions: list[tuple[str, str | None]]) -> set[tuple[str, frozenset[str]]]:
    ns = _ns()
    for name, content in mentions:
        _say(store, ns, name, content, kind="place" if name == "Paris" else "person")
    return _partition(store, ns)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picked=st.lists(st.sampled_from(_MENTIONS), min_size=1, max_size=9), data=st.data())
def test_any_order_and_duplication_of_the_same_mentions_gives_the_same_entities(store: Store, picked, data):
    reference = _replay(store, sorted(set(picked), key=_MENTIONS.index))
    shuffled = data.draw(st.permutations(picked + data.draw(st.lists(st.sampled_from(picked), max_size=4))))
    assert _replay(store, shuffled) == reference


def test_a_fact_restated_under_another_name_of_the_person_is_one_memory(store: Store):
    ns = _ns()
    _say(store, ns, "Melanie Hart", "Melanie Hart loves pottery")
    _say(store, ns, "Mel", "Mel loves pottery")
    _say(store, ns, "Melanie", "Melanie's sister lives in Oslo")
    _say(store, ns, "my wife", "My wife's sister lives in Oslo")  # before any memory says who the wife is
    assert len(store.memories(ns)) == 3
    _say(store, ns, "Melanie Hart", "Melanie Hart is the user's wife")  # the role merges "my wife" into her
    _say(store, ns, "my wife", "my wife loves pottery")
    assert sorted(_about(store, ns)) == ["Melanie Hart is the user's wife", "Melanie Hart loves pottery",
                                         "Melanie's sister lives in Oslo", "My wife's sister lives in Oslo"]
    # the memory kept under "my wife" now has her key: restating it by her name is no new memory
    _say(store, ns, "Mel", "Mel's sister lives in Oslo")
    assert len(store.memories(ns)) == 4
    [pottery] = [m for m in store.memories(ns) if m.content == "Melanie Hart loves pottery"]
    assert len(pottery.sources) == 3  # every restatement's source is kept


def test_entity_events_takes_a_name_as_merge_and_split_do(store: Store):
    # A name used to match no id and gave [] silently, though merge_entities and split_entity take names.
    ns = _ns()
    _say(store, ns, "Melanie Hart")
    _say(store, ns, "Lanie", "Lanie sings")
    kept = store.merge_entities(ns, "Melanie Hart", "Lanie", now=utc_now())
    by_id = store.entity_events(ns, kept["id"])
    assert [e["kind"] for e in by_id] == ["merge"]
    assert store.entity_events(ns, "Melanie Hart") == by_id
    assert store.entity_events(ns, "Lanie") == by_id  # an alias names the entity it was merged into
    gone = by_id[0]["other_id"]
    assert store.entity_events(ns, gone) == by_id  # a merged-away entity's id still finds its events
    with pytest.raises(NotFoundError, match="mem.entities"):
        store.entity_events(ns, "Nobody")


def test_entities_a_host_names_follow_the_person_rules(store: Store):
    mem = Memory(store=store, namespace=_ns())
    mem.remember("Melanie Hart loves pottery", about=["Melanie Hart"])
    assert mem.remember("Mel likes tea", about=["Mel"]).entities == ["Melanie Hart"]
    assert mem.remember("Bob visited Melanie", about=["Bob", "Melanie"]).entities == ["Bob", "Melanie Hart"]
    # A name the nicknames table lacks is a person when the host says so, and then claims its first name.
    mem.remember("Maya Chen works at Helix Health", about={"Maya Chen": "person", "Helix Health": "organization"})
    assert mem.remember("Maya bikes to work", about=["Maya"]).entities == ["Maya Chen"]
    # Not people: an organisation's first word, or a lower-case phrase, keeps its own entity.
    assert mem.remember("Helix is a start-up", about=["Helix"]).entities == ["Helix"]
    assert mem.remember("Art class is on Fridays", about=["Art class"]).entities == ["Art class"]
    kinds = {e["name"]: e["kind"] for e in mem.entities()}
    assert kinds == {"Melanie Hart": "person", "Bob": "person", "Maya Chen": "person",
                     "Helix Health": "organization", "Helix": "other", "Art class": "other"}


def test_an_unknown_entity_kind_from_the_host_is_refused_with_the_known_ones(tmp_path):
    mem = Memory(str(tmp_path / "m.db"))
    with pytest.raises(InvalidInput, match="unknown entity kind 'alien'.*person, place, organization"):
        mem.remember("Zork landed", about={"Zork": "alien"})
    assert mem.memories() == []
    mem.close()
