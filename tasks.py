#!/usr/bin/env python3
"""Project tasks that need nothing but Python 3.10+: ``python3 tasks.py <task>``.

main   build the environment in .venv, then run the main job: print the seed
       example, execute every notebook into out/notebooks (their figures into
       out/figures) and rebuild the report figures into out/report
test   build the environment in .venv (and, as root, install Chromium for the
       browser tests), then run the whole test suite
bench  build the environment in .venv, then print the speed benchmark
setup  only build the environment (and install the notebook filter and Lab's save hook, below)
strip-notebook  read a notebook on stdin, write it as the repository keeps it

Notebooks are committed clean: no outputs, no execution counts, and only the
kernel and the cell tags in their metadata. ``setup`` installs a git filter
(``.gitattributes`` names it for ``notebooks/**/*.ipynb``) that runs
``strip-notebook`` whenever git reads a notebook, so a notebook run in Lab,
with its outputs and the metadata Lab writes, shows no difference to git
(``git diff`` is empty, nothing to commit). Git's ``status`` compares file
sizes before contents, though, and would still list the notebook; so
``setup`` also gives the environment's JupyterLab a post-save hook
(:func:`lab_post_save_hook`) that refreshes git's index entry of a saved
notebook when git sees no difference in it: ``git status`` stays clean too.

The environment is rebuilt only when pyproject.toml or constraints.txt change
(a stamp file records their hash). Torch is pinned by constraints.txt to a
CPU build so that a fresh machine does not download a multi-GB CUDA build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".setup-stamp"


#: The notebook-level metadata the repository keeps (Lab adds versions and widget state on save).
NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}
NOTEBOOK_FILTER = "notebook-clean"


def clean_notebook(text: str) -> str:
    """A notebook as the repository keeps it: outputs and execution counts dropped, metadata reduced.

    Cells keep their ids, sources and ``tags`` (the tests find figure cells
    by tag); everything else a front end records (outputs, execution counts,
    scroll state, kernel versions, widget state) goes. The JSON is written as
    Jupyter writes it (sorted keys, one-space indent), so cleaning is
    idempotent and a notebook saved by Lab differs from the committed one
    only where its cells do.
    """
    nb = json.loads(text)
    nb["metadata"] = json.loads(json.dumps(NOTEBOOK_METADATA))
    for cell in nb.get("cells", []):
        tags = cell.get("metadata", {}).get("tags")
        cell["metadata"] = {"tags": tags} if tags else {}
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def strip_notebook() -> None:
    """The git clean filter: a notebook on stdin, its clean form on stdout."""
    sys.stdout.write(clean_notebook(sys.stdin.read()))


def install_notebook_filter() -> None:
    """Tell this checkout's git to clean notebooks with :func:`clean_notebook` (a no-op outside git)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return
    command = "python3 tasks.py strip-notebook"  # git runs a filter from the top of the work tree
    subprocess.run(["git", "config", f"filter.{NOTEBOOK_FILTER}.clean", command], cwd=ROOT, check=True)


def lab_post_save_hook(model: dict, os_path: str, contents_manager: object = None, **_: object) -> None:
    """JupyterLab's post-save hook: after a save that git sees as no change, refresh git's index entry.

    For a notebook the notebook filter covers (``git check-attr``) and git
    tracks: if ``git diff`` finds no difference (the filter strips everything
    Lab wrote), ``git add`` it, which stores the same blob and the file's new
    size, so ``git status`` no longer lists it. Nothing else is staged: a
    notebook with a real change is left alone. A failure is logged, never
    raised, so saving always works.
    """
    if model.get("type") != "notebook":
        return
    path = Path(os_path)

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args, "--", path.name], cwd=path.parent, capture_output=True, text=True)

    try:
        if not git("check-attr", "filter").stdout.strip().endswith(f": {NOTEBOOK_FILTER}"):
            return
        if git("ls-files", "--error-unmatch").returncode == 0 and git("diff", "--quiet").returncode == 0:
            git("add")
    except OSError as err:  # no git: the filter cannot run either, nothing to refresh
        log = getattr(contents_manager, "log", None)
        if log is not None:
            log.warning("robustgrpo post-save hook: %s", err)


#: Where ``setup`` puts the Jupyter server config that installs :func:`lab_post_save_hook`.
LAB_CONFIG = VENV / "etc" / "jupyter" / "jupyter_server_config.py"


def lab_config_text(tasks_file: Path) -> str:
    """The Jupyter server config that loads ``tasks_file`` and installs its :func:`lab_post_save_hook`."""
    return (
        "# Written by `python3 tasks.py setup` (rewritten at every setup): after Lab saves a notebook that\n"
        "# git sees as unchanged (the notebook filter strips outputs), refresh git's index entry for it.\n"
        "import importlib.util\n"
        "import pathlib\n\n"
        f"_tasks_file = pathlib.Path({str(tasks_file)!r})\n"
        "if _tasks_file.is_file():\n"
        "    _spec = importlib.util.spec_from_file_location('robustgrpo_tasks', _tasks_file)\n"
        "    _tasks = importlib.util.module_from_spec(_spec)\n"
        "    _spec.loader.exec_module(_tasks)\n"
        "    c.FileContentsManager.post_save_hook = _tasks.lab_post_save_hook  # noqa: F821 (c: the config)\n"
    )


def install_lab_hook(config: Path = LAB_CONFIG) -> None:
    """Write :func:`lab_config_text` for this checkout's tasks.py to ``config`` (the environment's Jupyter config)."""
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(lab_config_text(Path(__file__).resolve()))


def run(*cmd: str | os.PathLike[str]) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


def setup() -> None:
    install_notebook_filter()
    digest = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in ("pyproject.toml", "constraints.txt"))).hexdigest()
    if not (STAMP.exists() and STAMP.read_text() == digest and PYTHON.exists()):
        if not PYTHON.exists():
            print(f"creating virtual environment in {VENV.name}/", flush=True)
            venv.EnvBuilder(with_pip=True).create(VENV)
        pip = (PYTHON, "-m", "pip", "install", "--disable-pip-version-check")
        run(*pip, "-c", "constraints.txt", "-e", ".[dev,integrations,sweep]")
        STAMP.write_text(digest)
    install_lab_hook()


def ensure_browser() -> None:
    """Install Debian's Chromium for the browser tests when missing and allowed (root with apt)."""
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        run("apt-get", "update", "-q")
        run("apt-get", "install", "-y", "-q", "chromium")
    else:
        print("note: Chromium is not installed and cannot be installed here; the browser tests will be skipped", flush=True)


def main_job() -> None:
    setup()
    out = ROOT / "out"
    run(PYTHON, "-m", "robustgrpo", "demo")
    run(PYTHON, "-m", "robustgrpo", "notebooks", "--out", out)
    run(PYTHON, "-m", "robustgrpo", "figures", "--out", out / "report")
    print(f"\nexecuted notebooks: {out / 'notebooks'}\nnotebook figures:   {out / 'figures'}\nreport figures:     {out / 'report'} (index.md)")


def test() -> None:
    setup()
    ensure_browser()
    run(PYTHON, "-m", "pytest", *sys.argv[2:])


def bench() -> None:
    setup()
    run(PYTHON, "-m", "robustgrpo", "bench")


TASKS = {"main": main_job, "test": test, "bench": bench, "setup": setup, "strip-notebook": strip_notebook}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TASKS:
        sys.exit(f"usage: python3 tasks.py {{{'|'.join(TASKS)}}} [pytest args for test]")
    try:
        TASKS[sys.argv[1]]()
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode)
