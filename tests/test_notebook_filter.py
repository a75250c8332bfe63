"""Committed notebooks stay clean: the git filter that tasks.py installs strips what a front end writes."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tasks)

NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def _as_lab_saves_it(path: Path) -> str:
    """The notebook with outputs, counts and the metadata JupyterLab writes on save."""
    nb = json.loads(path.read_text())
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    for i, cell in enumerate(nb["cells"]):
        cell.setdefault("metadata", {})["collapsed"] = False
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
            cell["execution_count"] = i
    return json.dumps(nb, indent=2)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_are_already_clean(path):
    text = path.read_text()
    assert tasks.clean_notebook(text) == text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cleaning_a_run_notebook_gives_back_the_committed_file(path):
    dirty = _as_lab_saves_it(path)
    assert dirty != path.read_text()
    assert tasks.clean_notebook(dirty) == path.read_text()


def test_cleaning_keeps_cell_ids_sources_and_tags():
    nb = {"cells": [{"cell_type": "code", "id": "x1", "metadata": {"tags": ["figure"], "scrolled": True},
                     "source": ["1 + 1"], "outputs": [{"output_type": "execute_result"}], "execution_count": 4},
                    {"cell_type": "markdown", "id": "x2", "metadata": {"editable": False}, "source": ["# t"]}],
          "metadata": {"kernelspec": {"name": "other"}}, "nbformat": 4, "nbformat_minor": 5}
    clean = json.loads(tasks.clean_notebook(json.dumps(nb)))
    assert clean["cells"][0] == {"cell_type": "code", "id": "x1", "metadata": {"tags": ["figure"]}, "source": ["1 + 1"],
                                 "outputs": [], "execution_count": None}
    assert clean["cells"][1]["metadata"] == {} and clean["metadata"] == tasks.NOTEBOOK_METADATA


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_filter_keeps_a_run_notebook_out_of_a_commit(tmp_path):
    """A fresh repository with the project's .gitattributes and the filter as setup installs it."""
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "tasks.py", repo / "tasks.py")
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    committed = NOTEBOOKS[0].read_text()
    target = repo / "notebooks" / NOTEBOOKS[0].name
    target.write_text(committed)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "test@example.org")
    git("config", "user.name", "test")
    spec_repo = importlib.util.spec_from_file_location("repo_tasks", repo / "tasks.py")
    repo_tasks = importlib.util.module_from_spec(spec_repo)
    spec_repo.loader.exec_module(repo_tasks)
    repo_tasks.install_notebook_filter()
    assert git("config", "--get", f"filter.{tasks.NOTEBOOK_FILTER}.clean").strip() == "python3 tasks.py strip-notebook"
    git("add", "-A")
    git("commit", "-qm", "clean")
    target.write_text(_as_lab_saves_it(NOTEBOOKS[0]))  # run in Lab, outputs saved
    assert git("diff", "--stat") == ""  # nothing to see
    git("add", "-A")  # and nothing to commit
    assert git("status", "--porcelain") == ""
    assert git("show", f"HEAD:notebooks/{target.name}") == committed


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_labs_save_hook_keeps_git_status_clean_and_stages_no_real_change(tmp_path):
    """git status compares sizes first: a notebook saved with outputs is listed until its index entry is refreshed."""
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "tasks.py", repo / "tasks.py")
    shutil.copy(ROOT / ".gitattributes", repo / ".gitattributes")
    target = repo / "notebooks" / NOTEBOOKS[0].name
    target.write_text(NOTEBOOKS[0].read_text())

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "test@example.org")
    git("config", "user.name", "test")
    git("config", f"filter.{tasks.NOTEBOOK_FILTER}.clean", "python3 tasks.py strip-notebook")
    git("add", "-A")
    git("commit", "-qm", "clean")
    target.write_text(_as_lab_saves_it(NOTEBOOKS[0]))
    assert git("diff") == "" and git("status", "--porcelain").strip() == f"M notebooks/{target.name}"
    tasks.lab_post_save_hook({"type": "notebook"}, str(target))
    assert git("status", "--porcelain") == "" and git("diff", "--cached") == ""

    edited = json.loads(target.read_text())
    edited["cells"][0]["source"] = ["# a real change\n"]
    target.write_text(json.dumps(edited, indent=2))
    tasks.lab_post_save_hook({"type": "notebook"}, str(target))
    assert git("status", "--porcelain").strip() == f"M notebooks/{target.name}"  # listed, and not staged
    assert git("diff", "--cached") == "" and "a real change" in git("diff")
    (repo / "notes.ipynb").write_text(target.read_text())  # outside the filter: left alone
    tasks.lab_post_save_hook({"type": "notebook"}, str(repo / "notes.ipynb"))
    assert "?? notes.ipynb" in git("status", "--porcelain")


def test_setup_gives_lab_the_save_hook(tmp_path):
    from traitlets.config import Config

    config = tmp_path / "etc" / "jupyter" / "jupyter_server_config.py"
    tasks.install_lab_hook(config)
    c = Config()
    namespace = {"c": c}
    exec(config.read_text(), namespace)
    hook = c.FileContentsManager.post_save_hook
    assert hook.__name__ == "lab_post_save_hook" and hook.__module__ == "robustgrpo_tasks"
    assert tasks.LAB_CONFIG == tasks.VENV / "etc" / "jupyter" / "jupyter_server_config.py"
    assert "install_lab_hook()" in (ROOT / "tasks.py").read_text().split("def setup()")[1].split("def ")[0]
