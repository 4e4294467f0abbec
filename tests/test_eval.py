"""``tortoise eval locomo`` end to end, against the stub model on an ephemeral loopback port.

The data is a LoCoMo excerpt (conv-26, sessions 1-2 and the 20 questions whose evidence lies in
them; CC BY-NC 4.0, evaluation only: tests/data/README.md). The stub script
(tests/data/locomo_eval.script.json) holds a capable model's extraction of both sessions, the
answers it gives from each question's block, and a judge's labels, chosen by ``X-Tortoise-Stage``
and the prompt; so the J each category must get is known from the script.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import run_cli
from stub_model import StubModel
from tortoise_sdk.evaluation import CATEGORIES, load_conversations
from tortoise_sdk.evaluation.locomo import NOT_MENTIONED, Question, exact_match, normalize_answer
from tortoise_sdk.evaluation.report import percentile, usage_total
from tortoise_sdk.evaluation.runner import _label

DATA = Path(__file__).resolve().parent / "data"
EXCERPT = DATA / "locomo_conv26_excerpt.json"
SCRIPT = json.loads((DATA / "locomo_eval.script.json").read_text(encoding="utf-8"))
LOOPBACK = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])
QUESTIONS = load_conversations(EXCERPT)[0].questions


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "report.json"


def script(*extra_first: dict[str, Any]) -> dict[str, Any]:
    """The shared script, with ``extra_first`` routes tried before its own (faults)."""
    doc = copy.deepcopy(SCRIPT)
    doc["routes"] = [*extra_first, *doc["routes"]]
    return doc


def run_eval(capsys: pytest.CaptureFixture[str], out: Path, *args: str,
             stub: StubModel | None = None) -> tuple[int, str, str, dict[str, Any] | None]:
    model = ("--model", "openai/stub-model", "--api-base", stub.base_url, "--api-key", "sk-stub") if stub else ()
    code, stdout, stderr = run_cli(capsys, "eval", "locomo", str(EXCERPT), "--out", str(out), *model, *args)
    report = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    return code, stdout, stderr, report


def judge_labels() -> dict[tuple[str, str], str]:
    """(question, generated answer) -> the label the script's judge gives."""
    labels = {}
    for route in SCRIPT["routes"]:
        if route.get("stage") == "judge":
            question, answer = (c.split(": ", 1)[1] for c in route["contains"])
            labels[question, answer] = route["replies"][0]["content"]["label"]
    return labels


def expected_j(report: dict[str, Any], mode: str) -> dict[str, float]:
    """J per category and overall, from the script's labels for the answers the report holds."""
    labels = judge_labels()
    correct: Counter[str] = Counter()
    asked: Counter[str] = Counter()
    for r in report["questions"]:
        if r["mode"] != mode:
            continue
        group = CATEGORIES[r["category"]]
        hit = labels[r["question"], r["answer"]] == "CORRECT"
        for g in (group, "overall" if r["category"] != 5 else "adversarial"):
            asked[g] += 1
            correct[g] += hit
    return {g: round(correct[g] / asked[g], 4) for g in asked}


def got_j(report: dict[str, Any], mode: str) -> dict[str, float]:
    s = report["summary"][mode]
    return {**{name: g["j"] for name, g in s["categories"].items() if g["questions"]},
            "overall": s["overall"]["j"], "adversarial": s["adversarial"]["j"]}


def stages(stub: StubModel) -> Counter[str]:
    return Counter(r.stage for r in stub.requests)


# -- the data and the model-free judge ---------------------------------------------------------


def test_the_excerpt_loads_as_locomo_with_the_scorers_categories() -> None:
    # locomo10.json's numbers as LoCoMo's own scorer reads them (task_eval/evaluation.py).
    assert CATEGORIES == {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
    (conv,) = load_conversations(EXCERPT)
    assert conv.conversation_id == "conv-26"
    assert [(s["session_id"], s["date"], len(s["turns"])) for s in conv.sessions] == [
        ("conv-26-s1", "2023-05-08T13:56:00", 18), ("conv-26-s2", "2023-05-25T13:14:00", 17)]
    assert conv.sessions[0]["turns"][4]["content"].endswith("[shares a photo: a photo of a dog walking past a wall "
                                                            "with a painting of a woman]")
    assert Counter(q.category for q in conv.questions) == {4: 8, 5: 5, 2: 4, 1: 2, 3: 1}
    adversarial = next(q for q in conv.questions if q.category == 5)
    assert (adversarial.answer, adversarial.gold) == (None, NOT_MENTIONED)
    assert adversarial.adversarial_answer == "self-care is important"
    assert conv.questions[2].evidence == {"D1:9", "D1:11"}


def question(gold: str, category: int = 4) -> Question:
    return Question("q?", frozenset(), category, gold)


def test_exact_match_follows_locomos_normalisation() -> None:
    assert normalize_answer("The Sunday before 25 May, 2023!") == "sunday before 25 may 2023"
    assert exact_match("Mental health.", question("mental health"))
    assert exact_match("She ran it for mental health awareness", question("mental health"))
    assert not exact_match("party", question("art"))  # word-aligned, not any substring
    assert not exact_match("7 May", question("7 May 2023"))
    assert exact_match("Psychology", question("Psychology; counseling", category=3))  # up to the first ';'
    assert not exact_match("anything", question(""))
    # Adversarial: right when the answer says the conversation does not say (LoCoMo's rule).
    assert exact_match("Not mentioned in the conversation", question("", category=5))
    assert exact_match("There is no information available about that.", question("", category=5))
    assert not exact_match("self-care is important", question("", category=5))


_WORD = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8).filter(
    lambda w: w not in ("a", "an", "the", "and"))


@given(st.lists(_WORD, min_size=1, max_size=4), st.lists(_WORD, max_size=3), st.lists(_WORD, max_size=3),
       st.sampled_from(["", ".", "!", ","]))
def test_a_gold_answer_inside_a_longer_answer_matches(gold: list[str], before: list[str], after: list[str],
                                                      punct: str) -> None:
    answer = " ".join([*before, " ".join(gold).title() + punct, *after])
    assert exact_match(answer, question(" ".join(gold)))


def test_judge_label_is_read_from_json_or_a_single_label_word() -> None:
    assert _label('{"reason": "same date", "label": "CORRECT"}') == ("CORRECT", "same date")
    assert _label('```json\n{"label": "wrong"}\n```') == ("WRONG", None)
    assert _label("The answer names another city. WRONG") == ("WRONG", None)
    assert _label("CORRECT or WRONG, hard to say")[0] is None
    assert _label("")[0] is None


def test_summary_arithmetic_helpers() -> None:
    assert percentile([5, 1, 4, 2, 3], 50) == 3 and percentile([5, 1, 4, 2, 3], 95) == 5
    assert percentile([], 50) is None
    known = {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.5}
    assert usage_total([known, known, None]) == {"calls": 2, "prompt_tokens": 20, "completion_tokens": 4,
                                                 "cost_usd": 1.0}
    # One call without a price makes the total unknown, not smaller.
    assert usage_total([known, {**known, "cost_usd": None}])["cost_usd"] is None
    assert usage_total([{"calls": 3, **known}])["calls"] == 3
    refused = {"calls": 2, "failed": True, "prompt_tokens": None, "completion_tokens": None, "cost_usd": None}
    assert usage_total([known, refused]) == {"calls": 3, **{k: v for k, v in known.items()}}
    assert usage_total([]) == {"calls": 0, "prompt_tokens": None, "completion_tokens": None, "cost_usd": None}


# -- the whole command against the stub --------------------------------------------------------


@LOOPBACK
def test_verbatim_run_reports_the_judges_share_per_category(capsys, out, stub_model) -> None:
    stub = stub_model(script())
    code, stdout, stderr, report = run_eval(capsys, out, stub=stub)
    assert code == 0, stderr
    assert report["status"] == "complete" and stub.unanswered == []
    # Every call is labelled on the wire; no extraction in verbatim mode.
    assert stages(stub) == {"answer": 20, "judge": 20}
    first = next(r for r in stub.requests if r.stage == "judge")
    assert first.body["response_format"] == {"type": "json_object"} and first.body["temperature"] == 0.0
    # J is exactly the share the judge labelled CORRECT: 12 of 15, adversarial 3 of 5.
    assert got_j(report, "verbatim") == expected_j(report, "verbatim")
    assert got_j(report, "verbatim") == {"multi-hop": 0.5, "temporal": 0.75, "open-domain": 0.0, "single-hop": 1.0,
                                         "overall": 0.8, "adversarial": 0.6}
    overall = report["summary"]["verbatim"]["overall"]
    assert (overall["questions"], overall["judged"], overall["correct"]) == (15, 15, 12)
    # Recall is the mean over questions of the evidence the block's pointers lead to.
    rows = [r for r in report["questions"] if r["category"] != 5]
    assert overall["evidence_recall"] == round(
        sum(len(set(r["evidence"]) & set(r["found"])) / len(r["evidence"]) for r in rows) / len(rows), 4)
    tokens = sorted(r["block_tokens"] for r in rows)
    assert overall["block_tokens"] == {"mean": round(sum(tokens) / 15, 1), "p50": tokens[7], "p95": tokens[14]}
    assert overall["context_ms"]["p50"] <= overall["context_ms"]["p95"]
    # Calls, tokens and cost: the stub's usage summed; stub-model has no price, so cost is unknown.
    calls = report["summary"]["verbatim"]["calls"]
    assert calls["answer"] == {"calls": 20, "prompt_tokens": 6000, "completion_tokens": 160, "cost_usd": None}
    assert calls["judge"] == {"calls": 20, "prompt_tokens": 8400, "completion_tokens": 600, "cost_usd": None}
    assert calls["extraction"]["calls"] == 0
    # The prompts' hashes make two reports comparable; the key is never written.
    assert set(report["settings"]["prompts"]) == {"eval_answer", "eval_judge"}
    assert "sk-stub" not in out.read_text(encoding="utf-8")
    # The Markdown table is printed and written beside the report.
    assert "| verbatim | overall (1-4) | 15 | 80.0 |" in stdout
    assert out.with_suffix(".md").read_text(encoding="utf-8") == stdout


@LOOPBACK
def test_a_known_price_gives_a_cost(capsys, out, stub_model) -> None:
    stub = stub_model(script())
    code, _, stderr, report = run_eval(capsys, out, "--answer-model", "openai/gpt-4o-mini", stub=stub)
    assert code == 0, stderr
    calls = report["summary"]["verbatim"]["calls"]
    costs = [r["answer_usage"]["cost_usd"] for r in report["questions"]]
    assert all(c and c > 0 for c in costs)
    assert calls["answer"]["cost_usd"] == round(sum(costs), 6)
    assert calls["judge"]["cost_usd"] is None
    assert report["settings"]["models"] == {"extraction": None, "answer": "openai/gpt-4o-mini",
                                            "judge": "openai/stub-model"}


def _clean_summary(report: dict[str, Any]) -> dict[str, Any]:
    summary = copy.deepcopy(report["summary"])
    for groups in summary.values():
        for g in [groups["overall"], groups["adversarial"], *groups["categories"].values()]:
            g.pop("context_ms")  # timing differs run to run
    return summary


@LOOPBACK
@pytest.mark.parametrize("stage", ["answer", "judge"])
def test_a_provider_failure_mid_run_leaves_a_resumable_report(capsys, out, stub_model, tmp_path, stage) -> None:
    eighth = QUESTIONS[7].question
    stub = stub_model(script({"stage": stage, "contains": eighth, "replies": [{"status": 402}]}))
    code, _, stderr, report = run_eval(capsys, out, "--concurrency", "1", stub=stub)
    assert code == 1
    assert "billing" in stderr and "the 7 judged question(s) are kept" in stderr, stderr[-300:]
    assert "run the same command again to resume" in stderr
    assert report["status"] == "incomplete"
    judged = [r for r in report["questions"] if r["label"] is not None]
    assert [r["index"] for r in judged] == list(range(7))
    unjudged = [r for r in report["questions"] if r["label"] is None]
    assert [(r["index"], r["answer"]) for r in unjudged] == ([(7, "Mental health")] if stage == "judge" else [])
    assert report["summary"]["verbatim"]["overall"]["judged"] == 7

    # The same command resumes: nothing already paid for is asked again.
    before = stages(stub)
    code, _, stderr, resumed = run_eval(capsys, out, "--concurrency", "1", stub=stub)
    assert code == 0, stderr
    assert resumed["status"] == "complete"
    asked = stages(stub) - before
    assert asked == ({"answer": 12, "judge": 13} if stage == "judge" else {"answer": 13, "judge": 13})
    assert sum(1 for r in stub.requests if r.stage == "answer" and eighth in r.prompt) == (
        1 if stage == "judge" else 2)

    # ... and ends with the figures of a run in one go.
    code, _, _, whole = run_eval(capsys, tmp_path / "whole.json", stub=stub_model(script()))
    assert code == 0
    assert _clean_summary(resumed) == _clean_summary(whole)
    assert [(r["index"], r["answer"], r["label"]) for r in resumed["questions"]] == [
        (r["index"], r["answer"], r["label"]) for r in whole["questions"]]


@LOOPBACK
def test_with_calls_in_flight_a_failure_keeps_every_answer_that_came_back(capsys, out, stub_model) -> None:
    eighth = QUESTIONS[7].question
    # The refusal comes late, so the other workers' calls finish while it is pending.
    stub = stub_model(script({"stage": "judge", "contains": eighth, "replies": [{"status": 402, "delay": 0.5}]}))
    code, _, stderr, report = run_eval(capsys, out, "--concurrency", "4", stub=stub)
    assert code == 1 and "run the same command again to resume" in stderr
    judged = {r["index"] for r in report["questions"] if r["label"] is not None}
    assert 7 not in judged and len(judged) >= 7
    # Every call that returned is in the report: each judged question was answered and judged once.
    assert stages(stub)["judge"] == len(judged) + 1
    assert {r["index"] for r in report["questions"]} == {
        i for i, q in enumerate(QUESTIONS)
        if any(r.stage == "answer" and q.question in r.prompt for r in stub.requests)}
    code, _, _, resumed = run_eval(capsys, out, "--concurrency", "4", stub=stub)
    assert code == 0 and resumed["status"] == "complete"
    assert stages(stub) == {"answer": 20, "judge": 21}
    assert got_j(resumed, "verbatim")["overall"] == 0.8


@LOOPBACK
def test_a_complete_report_is_not_asked_again(capsys, out, stub_model) -> None:
    stub = stub_model(script())
    assert run_eval(capsys, out, stub=stub)[0] == 0
    first = json.loads(out.read_text(encoding="utf-8"))
    n = len(stub.requests)
    code, stdout, _, again = run_eval(capsys, out, stub=stub)
    assert code == 0 and len(stub.requests) == n
    assert again["summary"] == first["summary"] and again["questions"] == first["questions"]
    assert "| verbatim | overall (1-4) | 15 | 80.0 |" in stdout


@LOOPBACK
def test_a_reply_without_a_label_stays_unjudged_and_is_judged_on_the_next_run(capsys, out, stub_model) -> None:
    stub = stub_model(script({"stage": "judge", "contains": QUESTIONS[0].question,
                              "replies": [{"content": "I cannot tell whether that is CORRECT or WRONG."}]}))
    code, _, stderr, report = run_eval(capsys, out, stub=stub)
    assert code == 0
    assert "1 question(s) have no judge label" in stderr
    assert report["status"] == "incomplete"
    first = report["questions"][0]
    assert (first["label"], first["answer"]) == (None, "7 May 2023")
    temporal = report["summary"]["verbatim"]["categories"]["temporal"]
    assert (temporal["questions"], temporal["judged"]) == (4, 3)
    # J is over the judged questions only: the unjudged one is neither right nor wrong yet.
    labels = [r["label"] for r in report["questions"] if r["category"] == 2 and r["label"] is not None]
    assert temporal["j"] == round(labels.count("CORRECT") / 3, 4) == round(2 / 3, 4)
    before = stages(stub)
    code, _, _, report = run_eval(capsys, out, stub=stub)
    assert code == 0 and report["status"] == "complete"
    assert stages(stub) - before == {"judge": 1}
    assert report["questions"][0]["label"] == "CORRECT"


def test_a_report_resumes_only_with_the_same_settings(capsys, out) -> None:
    assert run_eval(capsys, out, "--judge", "exact", "--answer-from-block")[0] == 0
    code, _, stderr, _ = run_eval(capsys, out, "--judge", "exact", "--answer-from-block", "--budget", "3")
    assert code == 2
    assert "other settings (budget)" in stderr and "--out" in stderr


def test_a_run_without_any_model(capsys, out) -> None:
    # --block-network is on and no model is configured: nothing can be called.
    code, stdout, stderr, report = run_eval(capsys, out, "--judge", "exact", "--answer-from-block")
    assert code == 0, stderr
    assert report["settings"]["models"] == {"extraction": None, "answer": None, "judge": None}
    by_index = {q.index: q for q in QUESTIONS}
    for r in report["questions"]:
        assert r["answer_usage"] is None and r["judge_usage"] is None
        assert (r["label"] == "CORRECT") == exact_match(r["answer"], by_index[r["index"]])
        assert r["answer"] == NOT_MENTIONED if not r["pointers"] else r["answer"].startswith("turn 2023-05-")
    overall = report["summary"]["verbatim"]["overall"]
    assert overall["j"] == round(overall["correct"] / 15, 4)
    assert "gold in block (%)" in stdout


def test_an_interrupted_run_says_how_to_resume_and_resumes(capsys, out, tmp_path, monkeypatch) -> None:
    import tortoise_sdk.cli.evaluate as cli_eval

    @contextmanager
    def ctrl_c_after_seven() -> Iterator[Any]:
        def progress(phase: str, done: int, total: int) -> None:
            if phase.startswith("questions") and done == 7:
                raise KeyboardInterrupt  # in the main thread, where Ctrl-C lands
        yield progress

    no_model = ("--judge", "exact", "--answer-from-block")
    with monkeypatch.context() as m:
        m.setattr(cli_eval, "_progress", ctrl_c_after_seven)
        code, stdout, stderr, report = run_eval(capsys, out, *no_model)
    assert code == 130 and stdout == ""
    assert stderr == f"tortoise: interrupted; what was answered is kept in {out}; run the same command again to resume\n"
    assert report["status"] == "incomplete" and sum(r["label"] is not None for r in report["questions"]) >= 7
    code, _, _, resumed = run_eval(capsys, out, *no_model)
    code_whole, _, _, whole = run_eval(capsys, tmp_path / "whole.json", *no_model)
    assert code == code_whole == 0 and resumed["status"] == "complete"
    assert _clean_summary(resumed) == _clean_summary(whole)


def test_an_out_that_the_table_would_overwrite_is_refused(capsys, tmp_path) -> None:
    out = tmp_path / "report.md"
    code, _, stderr, _ = run_eval(capsys, out, "--judge", "exact", "--answer-from-block")
    assert code == 2 and "--out is the JSON report" in stderr and stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    ((), "no answer model"),
    (("--judge", "exact"), "--answer-from-block"),
    (("--answer-from-block",), "use it with --judge exact"),
    (("--mode", "memories", "--judge", "exact", "--answer-from-block"), "--mode memories extracts with a model"),
    (("--answer-model", "openai/x"), "no judge model"),
])
def test_missing_models_are_refused_before_anything_runs(capsys, out, args, message) -> None:
    code, _, stderr, report = run_eval(capsys, out, *args)
    assert code == 2 and message in stderr and stderr.count("\n") == 1
    assert report is None


# -- memories mode: the pipeline extracts first ------------------------------------------------


@LOOPBACK
def test_both_modes_each_in_its_own_store(capsys, out, stub_model) -> None:
    stub = stub_model(script())
    code, stdout, stderr, report = run_eval(capsys, out, "--mode", "both", stub=stub)
    assert code == 0, stderr
    assert stub.unanswered == []
    assert stages(stub) == {"s1": 2, "s2": 2, "s4": 2, "answer": 40, "judge": 40}
    assert out.with_name("report.verbatim.db").exists() and out.with_name("report.memories.db").exists()
    # Extraction: every session once, its calls and tokens counted.
    sessions = report["extraction"]["memories"]["conv-26"]
    assert {sid: [a["status"] for a in attempts] for sid, attempts in sessions.items()} == {
        "conv-26-s1": ["ok"], "conv-26-s2": ["ok"]}
    extraction = report["summary"]["memories"]["calls"]["extraction"]
    assert extraction["calls"] == 6
    assert extraction["prompt_tokens"] == sum(a["prompt_tokens"] for a in (sessions["conv-26-s1"][0],
                                                                          sessions["conv-26-s2"][0]))
    assert extraction["cost_usd"] is None
    assert set(report["settings"]["prompts"]) == {"eval_answer", "eval_judge", "s1_narrate", "s2_map", "vet",
                                                  "s4_review"}
    # The memory block holds memories, whose source turns count as the evidence they lead to.
    first = next(r for r in report["questions"] if r["mode"] == "memories" and r["index"] == 0)
    assert any(p.startswith("m_") for p in first["pointers"]) and "D1:3" in first["found"]
    assert all(not p.startswith("m_") for r in report["questions"] if r["mode"] == "verbatim" for p in r["pointers"])
    # Each mode's J is the judge's share for the answers given from that mode's blocks.
    assert got_j(report, "verbatim")["adversarial"] == 0.6
    assert got_j(report, "memories") == expected_j(report, "memories")
    assert got_j(report, "memories") == {"multi-hop": 0.5, "temporal": 0.75, "open-domain": 0.0, "single-hop": 1.0,
                                         "overall": 0.8, "adversarial": 1.0}
    assert "| memories | extraction | 6 |" in stdout


@LOOPBACK
def test_a_failed_extraction_stops_the_run_and_is_extracted_again_on_resume(capsys, out, stub_model) -> None:
    # The key stops working during session 2: its S1 is refused (401), a fatal class, so S2 and S4 are not asked.
    session_2 = "charity race for mental health last Saturday"
    stub = stub_model(script({"stage": "s1", "contains": session_2, "replies": [{"status": 401}]}))
    code, _, stderr, report = run_eval(capsys, out, "--mode", "memories", stub=stub)
    assert code == 1
    assert "extraction of conv-26-s2 failed" in stderr and "run the same command again to resume" in stderr
    assert report["status"] == "incomplete" and report["questions"] == []
    sessions = report["extraction"]["memories"]["conv-26"]
    assert {sid: [(a["status"], a["provider_failed"]) for a in attempts] for sid, attempts in sessions.items()} == {
        "conv-26-s1": [("ok", False)], "conv-26-s2": [(sessions["conv-26-s2"][0]["status"], True)]}
    assert "s1: auth" in sessions["conv-26-s2"][0]["errors"]
    assert stages(stub) == {"s1": 2, "s2": 1, "s4": 1}

    before = stages(stub)
    code, _, stderr, report = run_eval(capsys, out, "--mode", "memories", stub=stub)
    assert code == 0, stderr
    # Session 1 is not extracted again; session 2 is; the failed attempt's calls still count.
    assert stages(stub) - before == {"s1": 1, "s2": 1, "s4": 1, "answer": 20, "judge": 20}
    assert stub.unanswered == []
    sessions = report["extraction"]["memories"]["conv-26"]
    assert [a["status"] for a in sessions["conv-26-s2"]][1:] == ["ok"]
    failed = sessions["conv-26-s2"][0]
    assert (failed["calls"], failed["failed"], failed["prompt_tokens"]) == (1, True, None)
    # The refused calls count as calls; they produced and billed nothing, so the tokens stay known.
    extraction = report["summary"]["memories"]["calls"]["extraction"]
    assert extraction["calls"] == 7
    assert extraction["prompt_tokens"] == sessions["conv-26-s1"][0]["prompt_tokens"] + sessions["conv-26-s2"][1][
        "prompt_tokens"]
    assert got_j(report, "memories")["overall"] == 0.8
