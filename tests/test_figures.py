"""``--record`` turns a benchmark run into the docs fragment that regenerates itself (benchmarks/figures.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import figures  # noqa: E402

META = {"command": "python benchmarks/bench_capture.py --record", "revision": "a44858e", "modified": False,
        "recorded_at": "2026-12-01T19:00:00Z", "seconds": 12.0, "load_before": [1.5, 1.0, 0.5],
        "load_after": [1.6, 1.1, 0.6], "cpus": 2, "python": "3.11.7", "exit_status": 0}


def _run(into: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORTOISE_FIGURES_DIR": str(into)}
    env.pop("TORTOISE_FIGURES_CHILD", None)
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_capture.py"), *argv], env=env,
                          capture_output=True, text=True, timeout=300)


def test_record_writes_what_the_script_printed_with_the_command_that_regenerates_it(tmp_path):
    done = _run(tmp_path / "figures", "--smoke", "--record=try")
    assert done.returncode == 0, done.stderr
    meta = figures.parse((tmp_path / "figures" / "bench_capture-try.md").read_text(encoding="utf-8"))
    assert meta["output"] == done.stdout.rstrip("\n") and "turns/s" in meta["output"]
    assert meta["command"] == "python benchmarks/bench_capture.py --smoke --record=try"
    assert len(meta["load_before"]) == 3 and meta["cpus"] and meta["revision"]


def test_a_failed_run_records_nothing(tmp_path):
    done = _run(tmp_path / "figures", "--turns", "many", "--record")
    assert done.returncode == 2 and "nothing recorded" in done.stderr
    assert not (tmp_path / "figures").exists()


def test_a_run_that_misses_a_goal_is_recorded_with_its_exit_status(tmp_path):
    script = tmp_path / "bench_goal.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(REPO / 'benchmarks')!r})\nimport figures\n"
                      "figures.record_if_asked(__file__)\nprint('p95 43.54 ms: goal <= 20 ms MISSED')\nsys.exit(1)\n")
    env = {**os.environ, "TORTOISE_FIGURES_DIR": str(tmp_path / "figures")}
    done = subprocess.run([sys.executable, str(script), "--record"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    text = (tmp_path / "figures" / "bench_goal.md").read_text(encoding="utf-8")
    assert figures.parse(text)["exit_status"] == 1 and "exit status 1" in text and "MISSED" in text


def test_a_smoke_run_is_not_recorded_into_the_docs():
    env = {k: v for k, v in os.environ.items() if k not in ("TORTOISE_FIGURES_DIR", "TORTOISE_FIGURES_CHILD")}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_capture.py"), "--smoke", "--record"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--smoke" in done.stderr
    assert not (figures.FIGURES / "bench_capture.md").exists() or "--smoke" not in (
        figures.FIGURES / "bench_capture.md").read_text(encoding="utf-8")


def test_a_label_names_the_file_and_must_be_a_plain_word():
    assert figures.fragment_name("benchmarks/bench_reflex_latency.py", "pastes") == "bench_reflex_latency-pastes"
    assert figures.fragment_name("bench_capture.py") == "bench_capture"
    with pytest.raises(SystemExit, match="label"):
        figures.fragment_name("bench_capture.py", "../x")


_OUTPUT = st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20)
                   | st.sampled_from(["\n", "`", "```", "<!--", "-->", "|", " "]), max_size=20).map("".join)


@given(_OUTPUT)
def test_a_fragment_parses_back_to_what_was_rendered(output):
    meta = {**META, "output": output.rstrip("\n")}
    assert figures.parse(figures.render(meta)) == meta


@given(_OUTPUT, st.data())
def test_a_fragment_edited_by_hand_is_refused(output, data):
    text = figures.render({**META, "output": output.rstrip("\n")})
    at = data.draw(st.integers(0, len(text) - 1))
    edited = text[:at] + ("7" if text[at] != "7" else "8") + text[at + 1:]
    with pytest.raises(ValueError):
        figures.parse(edited)
