"""The wheel installs cleanly: prompts and adapters inside tortoise_sdk, no generic top-level names."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # Built from a clean copy of the sources: an in-tree build reuses build/lib, whose stale
    # modules would hide a package missing from pyproject's packages=.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    for name in ("tortoise_sdk", "prompts", "adapters"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (whl,) = out.glob("tortoise_sdk-*.whl")
    return whl


def test_wheel_layout(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top <= {"tortoise_sdk"} | {n for n in top if n.endswith((".dist-info", ".data"))}
    prompts = sorted(p.name for p in (REPO / "prompts").glob("*.md"))
    assert prompts, "no prompt templates in prompts/"
    for name in prompts:
        assert f"tortoise_sdk/prompts/{name}" in names
    for py in (REPO / "adapters").glob("*.py"):
        assert f"tortoise_sdk/adapters/{py.name}" in names
    assert "tortoise_sdk/demo/sessions.json" in names
    # The reflex's WordNet table ships with WordNet's licence beside it.
    assert {"tortoise_sdk/reflex/instances.tsv.gz", "tortoise_sdk/reflex/instances.LICENSE"} <= set(names)
    # pyproject's packages= is an explicit list: a sub-package missing there would be left out.
    for py in sorted((REPO / "tortoise_sdk").rglob("*.py")):
        module = f"tortoise_sdk/{py.relative_to(REPO / 'tortoise_sdk').as_posix()}"
        assert module in names, f"{module} is not in the wheel: add its package to pyproject's packages="
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tortoise = tortoise_sdk.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_wheel_installs_into_a_clean_venv_and_imports(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    # Dependencies come from the test environment's site-packages, added as a plain path:
    # its .pth files (the editable install of this repo) are not processed there.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    check = textwrap.dedent(
        """
        import importlib.util, sys
        from importlib import resources
        import tortoise_sdk, tortoise_sdk.adapters, tortoise_sdk.prompts
        assert tortoise_sdk.__file__.startswith(sys.argv[1]), tortoise_sdk.__file__
        templates = [p.name for p in resources.files("tortoise_sdk.prompts").iterdir() if p.name.endswith(".md")]
        assert templates, "prompts missing from the installed package"
        for t in templates:
            assert resources.files("tortoise_sdk.prompts").joinpath(t).read_text(encoding="utf-8").strip()
        assert importlib.util.find_spec("adapters") is None and importlib.util.find_spec("prompts") is None
        from tortoise_sdk import Memory
        with Memory(sys.argv[2]) as m:
            m.capture("s", [{"role": "user", "content": "installed from the wheel"}])
            assert m.search("wheel")[0].content == "installed from the wheel"
        print(sorted(templates))
        """
    )
    proc = subprocess.run([str(py), "-c", check, site, str(tmp_path / "w.db")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
