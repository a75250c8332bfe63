"""A package like the ones trainers use (issue 42): a version that moves with its changelog, --version, the console
script named as itself, py.typed and the schemas in the wheel, extras that each command names, the TRL trainer
visible to help(), IDEs and type checkers without importing trl at ``import robustgrpo``."""

from __future__ import annotations

import ast
import email
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import robustgrpo
from robustgrpo.cli import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _blocked(code: str, blocked: list[str]) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where ``blocked`` packages cannot be imported (as on a smaller install)."""
    prelude = ("import importlib.abc, sys\n"
               f"BLOCKED = {blocked!r}\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name.split('.')[0] in BLOCKED:\n"
               "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)', name=name)\n"
               "sys.meta_path.insert(0, Block())\n")
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_one_version_in_the_package_pyproject_the_changelog_and_the_command_line(capsys):
    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "robustgrpo.__version__"}
    assert robustgrpo.__version__ == "0.2.0"
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased" and headings[1] == f"{robustgrpo.__version__} - 2026-12-04"
    assert headings[2] == "0.1.0"
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"robustgrpo {robustgrpo.__version__}\n"


def test_the_console_script_names_itself(monkeypatch, capsys):
    target = PYPROJECT["project"]["scripts"]["robustgrpo"]
    module, function = target.split(":")
    entry = getattr(__import__(module, fromlist=[function]), function)
    monkeypatch.setattr(sys, "argv", ["robustgrpo", "diagnose", "/no/such/log.csv"])
    assert entry() == 2
    assert capsys.readouterr().err.startswith("robustgrpo diagnose: error: /no/such/log.csv: no such file or folder")
    monkeypatch.setattr(sys, "argv", ["robustgrpo", "--version"])
    with pytest.raises(SystemExit):
        entry()
    assert capsys.readouterr().out == f"robustgrpo {robustgrpo.__version__}\n"
    assert main(["diagnose", "/no/such/log.csv"]) == 2  # python -m robustgrpo keeps its name
    assert capsys.readouterr().err.startswith("python -m robustgrpo diagnose: error:")


def test_py_typed_and_the_schemas_are_package_data():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["robustgrpo"]
    assert {"py.typed", "schemas/*.json", "recommendation.json"} <= set(data)
    assert (ROOT / "robustgrpo" / "py.typed").is_file()
    assert sorted(p.name for p in (ROOT / "robustgrpo" / "schemas").glob("*.json")) == [
        "diagnose.schema.json", "estimators.schema.json", "sweep_status.schema.json"]


@pytest.mark.slow
def test_the_wheel_holds_what_a_user_installs(tmp_path):
    """Build the wheel from a copy of the sources, as pip does; it carries the version, the extras, the console
    script, py.typed, the schemas and the recommendation."""
    pytest.importorskip("setuptools")
    source = tmp_path / "src"
    shutil.copytree(ROOT / "robustgrpo", source / "robustgrpo", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("robustgrpo-*.whl")
    assert wheel.name.startswith(f"robustgrpo-{robustgrpo.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"robustgrpo-{robustgrpo.__version__}.dist-info"
        metadata = email.message_from_string(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {"robustgrpo/py.typed", "robustgrpo/recommendation.json", "robustgrpo/schemas/diagnose.schema.json",
            "robustgrpo/schemas/estimators.schema.json", "robustgrpo/schemas/sweep_status.schema.json",
            "robustgrpo/integrations/trl_trainer.py"} <= names
    assert metadata["Version"] == robustgrpo.__version__
    assert {"lab", "plots", "book", "trl", "verl"} <= set(metadata.get_all("Provides-Extra"))
    requires = metadata.get_all("Requires-Dist")
    assert "torch>=2.2" in requires and not any(r.startswith("torch==") for r in requires)
    assert "robustgrpo = robustgrpo.cli:console" in entry_points


@pytest.mark.slow
def test_diagnose_html_needs_matplotlib_not_the_book(tmp_path):
    page = tmp_path / "report.html"
    code = ("from robustgrpo.cli import main\n"
            f"sys.exit(main(['diagnose', 'data/reward_logs/binary_judge_glitch.csv', '--html', {str(page)!r}]))\n")
    done = _blocked(code, ["plotly", "ipywidgets", "anywidget", "jupyterlab", "nbclient", "nbformat", "IPython"])
    assert done.returncode == 0, done.stderr
    assert page.read_text().count("data:image/png;base64,") == 3
    without = _blocked(code.replace("report.html", "other.html"), ["matplotlib"])
    assert without.returncode == 2 and "Traceback" not in without.stderr
    assert without.stderr.strip().endswith("this command needs the lab,plots extras (matplotlib is not installed): in a "
                                           "clone of robustgrpo, pip install -e '.[lab,plots]'")


@pytest.mark.slow
def test_a_command_without_its_extras_names_every_one_it_needs():
    for argv, extras in ((["demo"], "lab,book"), (["diagnose", "data/reward_logs/binary_judge_glitch.csv"], "lab"),
                         (["battery", "--quick"], "lab")):
        done = _blocked(f"from robustgrpo.cli import main\nsys.exit(main({argv!r}))\n", ["pandas", "scipy", "matplotlib"])
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"needs the {extras} extra{'s' * (',' in extras)} (" in done.stderr
        assert f"pip install -e '.[{extras}]'" in done.stderr


@pytest.mark.slow
def test_the_readme_core_example_says_what_needs_the_lab():
    code = ("import robustgrpo\n"
            "result = robustgrpo.compute_advantages([[0, 0, 0, 0, 0, 0, 1.0, 10.0]], reward_range=(0, 1))\n"
            "assert result.diagnostics.fallback is not None\n"
            "try:\n"
            "    result.diagnostics.to_frame()\n"
            "except ModuleNotFoundError as err:\n"
            "    print(err)\n")
    done = _blocked(code, ["pandas"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("to_frame() needs pandas, which the core does not install: pip install pandas, or the "
                                  "lab extra")
    readme = (ROOT / "README.md").read_text()
    assert "result.diagnostics.to_frame()" in readme and "(pandas: the lab extra)" in readme


def test_readme_installs_into_a_trainer_environment_without_the_torch_pin():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## In your trainer", 1)[1].split("**TRL.**", 1)[0]
    install = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in install.strip().splitlines()]
    assert commands == ["cd robustgrpo", "pip install '.[trl]'", "pip install '.[lab,plots]'"]
    assert "URL" not in install and '"robustgrpo[trl] @ git+URL"' in section  # (no placeholder to fill in)
    assert "constraints" not in install and "never pass it (`-c`)" in section
    assert "console script, `robustgrpo`" in section and "py.typed" in section


@pytest.mark.slow
def test_the_trl_trainer_is_declared_for_type_checkers_ides_and_help():
    # what a type checker or an IDE reads: a TYPE_CHECKING import of a class defined at the top of its module
    adapter = ast.parse((ROOT / "robustgrpo" / "integrations" / "trl.py").read_text())
    guarded = [node for node in adapter.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert [ast.unparse(n) for g in guarded for n in g.body] == [
        "from robustgrpo.integrations.trl_trainer import RobustGRPOTrainer"]
    trainer = ast.parse((ROOT / "robustgrpo" / "integrations" / "trl_trainer.py").read_text())
    [cls] = [n for n in trainer.body if isinstance(n, ast.ClassDef) and n.name == "RobustGRPOTrainer"]
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert [a.arg for a in init.args.kwonlyargs] == ["advantage_method", "advantage_params", "reward_range",
                                                     "out_of_range", "drop_pivot", "reward_kind"]
    # importing robustgrpo, or the adapter, imports no trainer; dir() and help() list the class (importing trl then)
    done = subprocess.run([sys.executable, "-c", "import sys, robustgrpo, robustgrpo.integrations.trl as t; "
                           "print('trl' in sys.modules, 'RobustGRPOTrainer' in dir(t))"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["False", "True"], done.stderr
    pytest.importorskip("trl")
    import pydoc

    import robustgrpo.integrations.trl as adapter_module

    page = pydoc.render_doc(adapter_module, renderer=pydoc.plaintext)
    assert "class RobustGRPOTrainer(trl.trainer.grpo_trainer.GRPOTrainer)" in page
    assert "RobustGRPOTrainer(*args: 'Any', advantage_method: 'str | None' = None" in page


def test_a_misspelt_trainer_argument_names_the_closest():
    pytest.importorskip("trl")
    from robustgrpo.integrations.trl import RobustGRPOTrainer

    with pytest.raises(TypeError, match=r"unexpected keyword argument 'reward_rnage'; did you mean 'reward_range'\? its "
                                        r"own arguments: advantage_method, .*; GRPOTrainer's: model, reward_funcs, args"):
        RobustGRPOTrainer(model=None, reward_funcs=None, reward_rnage=(0, 1))
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['reward_rnage'\]; .* did you mean 'reward_range'\?$"):
        RobustGRPOTrainer(model=None, reward_funcs=None, advantage_method="rank", advantage_params={"reward_rnage": (0, 1)})
