"""Duplicates and split people: twenty sessions whose S2/S4 replies restate facts in new words and name
people by nickname, role and full name, replayed through the pipeline against the stub model.

Five households (a user and three people each: a full name, a first name, a nickname from the
nickname table or a clipped name, and a role such as "Sam's wife"), four sessions each. Session
1 names everyone in full and says who they are to the user; sessions 2-4 call them by nickname,
by role and by first name, and restate earlier facts: some with small changes of wording (tense,
fillers, number words, an added word), some as paraphrases, which no key catches. S4 adds, as a model
reviewing the draft against the stored facts does, one item per session that restates a draft
item under the person's full name.

The replies are written by this script from the table below, as a capable model would answer
those prompts (the S2 item names the person as the turn does, the quote is verbatim); they are
not a model's output. ``--write-script FILE`` writes every session's turns and replies for review
(``benchmarks/dedupe_replies.json`` is that file). The stub is ``tests/stub_model.py``, the one the
cassettes are recorded from.

Figures (deterministic: no time is measured): duplicates per 100 live memories (a live memory
whose fact another live memory already states) and entities per real person (the entities
holding the names of one person). ``--rev REV`` runs the same replay with REV's code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of litellm's price list

import figures  # noqa: E402
import revision  # noqa: E402
from stub_model import StubModel  # noqa: E402

#: (user, [(full name, nickname, role word, [facts: (first wording, restated wording, paraphrase)]), ...])
HOUSEHOLDS: list[tuple[str, list[tuple[str, str, str, list[tuple[str, str, str]]]]]] = [
    ("Sam", [
        ("Melanie Hart", "Mel", "wife", [
            ("loves pottery", "really loves pottery", "is passionate about ceramics"),
            ("works as a nurse at the county hospital", "worked as a nurse at the county hospital",
             "is a nurse in the county hospital"),
            ("runs every Sunday morning", "runs every single Sunday morning", "goes jogging on Sunday mornings")]),
        ("Robert Stone", "Bob", "boss", [
            ("drives a red pickup truck", "drives a red pickup", "has a red pickup truck"),
            ("moved to Denver in 2019", "moved to Denver back in 2019", "has lived in Denver since 2019"),
            ("plays the saxophone", "plays the saxophone too", "is a saxophone player")]),
        ("Caroline Diaz", "Caro", "sister", [
            ("has two cats named Miso and Tofu", "has 2 cats named Miso and Tofu", "owns two cats, Miso and Tofu"),
            ("studies marine biology", "is studying marine biology", "is a marine biology student"),
            ("is allergic to peanuts", "is very allergic to peanuts", "cannot eat peanuts")]),
    ]),
    ("Priya", [
        ("Jonathan Reyes", "Jon", "husband", [
            ("coaches a youth soccer team", "coaches the youth soccer team", "is a soccer coach for kids"),
            ("bakes sourdough bread on weekends", "baked sourdough bread on weekends", "makes sourdough at weekends"),
            ("is learning Japanese", "is learning Japanese now", "takes Japanese lessons")]),
        ("Margaret Okafor", "Peggy", "mother", [
            ("grows tomatoes in her garden", "grows the tomatoes in her garden", "has a tomato garden"),
            ("retired from teaching in 2021", "retired from teaching back in 2021", "stopped teaching in 2021"),
            ("visits every Thanksgiving", "visits us every Thanksgiving", "comes over for Thanksgiving")]),
        ("Daniel Kim", "Dan", "manager", [
            ("approved the new project budget", "approved the project budget", "signed off on the budget"),
            ("prefers meetings before noon", "prefers meetings before noon too", "likes morning meetings"),
            ("has a golden retriever", "has a golden retriever called Max", "owns a golden retriever")]),
    ]),
    ("Leo", [
        ("Elizabeth Moore", "Liz", "partner", [
            ("paints watercolor landscapes", "paints watercolour landscapes", "does landscape watercolors"),
            ("works night shifts at the bakery", "works the night shifts at the bakery", "bakes at night for work"),
            ("wants to visit Iceland", "really wants to visit Iceland", "dreams of a trip to Iceland")]),
        ("William Park", "Bill", "father", [
            ("restores old motorcycles", "restored old motorcycles", "fixes up vintage motorbikes"),
            ("had knee surgery in March", "had a knee surgery in March", "got his knee operated on in March"),
            ("lives in Portland", "still lives in Portland", "is based in Portland")]),
        ("Katherine Ross", "Kate", "roommate", [
            ("plays the cello", "plays cello", "is a cellist"),
            ("works from home on Fridays", "works from home on Fridays now", "is remote on Fridays"),
            ("is vegetarian", "is a vegetarian", "does not eat meat")]),
    ]),
    ("Ana", [
        ("Christopher Lane", "Chris", "husband", [
            ("builds furniture in the garage", "builds furniture in our garage", "makes furniture as a hobby"),
            ("started a new job at the bank", "started the new job at the bank", "began working at the bank"),
            ("snores loudly", "snores really loudly", "is a loud snorer")]),
        ("Susan Wright", "Sue", "boss", [
            ("runs the Tuesday standup", "runs the Tuesday standups", "leads standup on Tuesdays"),
            ("speaks fluent French", "speaks fluent French too", "is fluent in French"),
            ("is moving to the London office", "is moving to the London office soon", "will transfer to London")]),
        ("Anthony Diaz", "Tony", "brother", [
            ("plays drums in a band", "plays the drums in a band", "is a drummer in a band"),
            ("lives in Austin", "lives in Austin now", "is based in Austin"),
            ("collects vinyl records", "collects vinyl records still", "has a vinyl collection")]),
    ]),
    ("Omar", [
        ("Victoria Hale", "Vicky", "wife", [
            ("teaches yoga classes", "teaches the yoga classes", "is a yoga teacher"),
            ("grew up in Cairo", "grew up in Cairo actually", "was raised in Cairo"),
            ("loves spicy food", "loves really spicy food", "enjoys hot food")]),
        ("Nicholas Grant", "Nick", "cousin", [
            ("is training for a marathon", "is training for the marathon", "prepares for a marathon"),
            ("owns a coffee shop", "owns a coffee shop downtown", "runs a coffee business"),
            ("has three kids", "has 3 kids", "is a father of three")]),
        ("Patricia Young", "Pat", "mother", [
            ("knits sweaters for everyone", "knits the sweaters for everyone", "makes knitted sweaters"),
            ("goes to church every Sunday", "goes to church every Sunday morning", "attends Sunday church"),
            ("had a birthday party in May", "had her birthday party in May", "celebrated her birthday in May")]),
    ]),
]
#: Per session: (the name form people are called by, [(fact index, wording index)]). Wording 0 is the
#: first; 1 restates it with small changes (tense, a filler, a number word, or an added word such as
#: "back", "now", "downtown" that no fact key drops); 2 is a paraphrase.
PLAN = [
    ("full", [(0, 0)]),
    ("nick", [(0, 1), (1, 0)]),
    ("role", [(1, 1), (2, 0), (0, 0)]),
    ("first", [(2, 1), (1, 2), (0, 1)]),
]
EMPTY = {"entities": [], "events": [], "points": [], "retractions": []}


def _form(user: str, full: str, nick: str, role: str, how: str) -> tuple[str, str]:
    """``(name in the S2 item, name as the user says it)`` for one way of naming the person."""
    if how == "full":
        return full, full
    if how == "nick":
        return nick, nick
    if how == "role":
        return f"{user}'s {role}", f"My {role}"
    return full.split()[0], full.split()[0]


def build() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, str]]:
    """The sessions (namespace, id, turns), the stub script and the fact id of every scripted content."""
    sessions: list[dict[str, Any]] = []
    routes: list[dict[str, Any]] = []
    fact_of: dict[str, str] = {}
    for h, (user, people) in enumerate(HOUSEHOLDS):
        for s, (how, picks) in enumerate(PLAN):
            marker = f"(session {h}.{s})"
            turns: list[dict[str, Any]] = [{"role": "user", "name": user, "content": f"Catching up {marker}."}]
            entities, points, s4 = [], [], []
            for p, (full, nick, role, facts) in enumerate(people):
                name, said = _form(user, full, nick, role, how)
                entities.append({"name": name, "kind": "person",
                                 **({"note": f"{user}'s {role}"} if how == "full" else {})})
                if how == "full":
                    i = len(turns)
                    turns.append({"role": "user", "name": user, "content": f"{full} is my {role}, by the way."})
                    content = f"{full} is {user}'s {role}"
                    fact_of[content] = f"{h}:{p}:role"
                    points.append({"content": content, "about": [full], "quote": f"is my {role}", "turn": i,
                                   "search_keys": [role]})
                for f, w in picks:
                    pred = facts[f][w]
                    i = len(turns)
                    turns.append({"role": "user", "name": user, "content": f"{said} {pred}."})
                    content = f"{name} {pred}"
                    fact_of[content] = f"{h}:{p}:{f}"
                    points.append({"content": content, "about": [name], "quote": pred, "turn": i})
                    if how != "full" and p == s % len(people) and not s4:
                        # the reviewer, seeing the stored facts under her full name, adds it under that name
                        again = f"{full} {facts[f][0]}"
                        fact_of[again] = f"{h}:{p}:{f}"
                        s4.append({"content": again, "about": [full], "quote": pred, "turn": i})
            story = f"{user} talked about " + "; ".join(p["content"] for p in points) + "."
            routes += [
                {"stage": "s1", "contains": marker, "replies": [{"content": story}], "cycle": True},
                {"stage": "s2", "contains": marker, "replies": [{"content": {
                    "entities": entities, "events": [], "points": points, "retractions": []}}], "cycle": True},
                {"stage": "s4", "contains": marker, "replies": [{"content": {
                    **EMPTY, "points": s4, "entities": [{"name": x["about"][0], "kind": "person"} for x in s4]}}],
                 "cycle": True},
            ]
            sessions.append({"namespace": f"household-{h}", "session_id": f"h{h}-s{s}",
                             "date": f"2024-0{s + 1}-15", "turns": turns})
    about = ("Written by benchmarks/bench_dedupe.py from its HOUSEHOLDS table, as a capable model would answer "
             "the S1/S2/S4 prompts of these sessions; not a model's output.")
    return sessions, {"about": about, "routes": routes}, fact_of


def _person_forms(user: str, full: str, nick: str, role: str) -> set[str]:
    from tortoise_sdk.text import norm_name

    return {norm_name(x) for x in (full, full.split()[0], nick, f"{user}'s {role}", f"my {role}")}


def measure(households: int) -> dict[str, float]:
    """Replay the sessions of the first ``households`` and count duplicates and entities per person."""
    from tortoise_sdk import Memory
    from tortoise_sdk.text import norm_name

    sessions, script, fact_of = build()
    keep = {f"household-{h}" for h in range(households)}
    memories = duplicates = entities = people = 0
    with tempfile.TemporaryDirectory() as tmp, StubModel(script) as stub:
        db = str(Path(tmp) / "bench.db")
        for ns in sorted(keep):
            with Memory(db, namespace=ns, model="openai/stub-model", api_base=stub.base_url,
                        api_key="sk-stub") as mem:
                for s in (x for x in sessions if x["namespace"] == ns):
                    report = mem.capture(s["session_id"], s["turns"], session_date=s["date"]).extraction
                    if report is None or report.status not in ("ok", "partial"):
                        sys.exit(f"extraction of {s['session_id']} failed: {report}")
                live = mem.memories()
                facts = [fact_of.get(m.content, f"unscripted:{m.content}") for m in live]
                memories += len(live)
                duplicates += len(facts) - len(set(facts))
                user, cast = HOUSEHOLDS[int(ns.rsplit("-", 1)[1])]
                found = mem.entities()
                for full, nick, role, _ in cast:
                    forms = _person_forms(user, full, nick, role)
                    entities += sum(1 for e in found if norm_name(e["name"]) in forms)
                    people += 1
    return {"duplicates_per_100": 100.0 * duplicates / max(memories, 1), "entities_per_person": entities / people,
            "memories": float(memories), "duplicates": float(duplicates)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    figures.add_option(ap)
    ap.add_argument("--households", type=int, default=len(HOUSEHOLDS), help="households replayed (4 sessions each)")
    ap.add_argument("--smoke", action="store_true", help="one household (4 sessions), for the tests")
    ap.add_argument("--write-script", metavar="FILE", help="write the sessions and scripted replies as JSON and exit")
    revision.add_options(ap, rounds=1)
    args = ap.parse_args()
    if args.smoke:
        args.households, args.rounds = 1, 1
    if args.write_script:
        sessions, script, _ = build()
        Path(args.write_script).write_text(json.dumps({"sessions": sessions, "script": script}, indent=1,
                                                      ensure_ascii=False) + "\n", encoding="utf-8")
        return 0
    if args.measure_json:
        print(json.dumps(measure(args.households)))
        return 0
    fig = measure(args.households)
    n = args.households
    print(f"dedupe replay: {n} households x {len(PLAN)} sessions, {n * 3} people; scripted S1/S2/S4 replies")
    print(f"  live memories {fig['memories']:.0f}, duplicates {fig['duplicates']:.0f}: "
          f"{fig['duplicates_per_100']:.1f} per 100 memories; entities per real person {fig['entities_per_person']:.2f}")
    if args.rev:
        ours, theirs = revision.alternate(__file__, ["--households", str(n)], args.rev, args.rounds)
        revision.report(args.rev, args.rounds, ours, theirs, {
            "memories": "live memories", "duplicates_per_100": "duplicates per 100 memories",
            "entities_per_person": "entities per real person"})
    return 0


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    sys.exit(main())
