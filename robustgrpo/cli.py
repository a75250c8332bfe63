"""Command line: ``python -m robustgrpo <command>``, or ``robustgrpo <command>`` (the console script pip installs).

Commands
--------
demo        seed 000's poisoned group through every estimator, next to the clean group
estimators  the catalogue: names, formulas, parameters
bench       time every estimator against idiomatic grpo and numpy + scipy (--trainer: inside TRL's trainer;
            --adapters: the verl adapter on verl's layout; --scaling: time and memory as B and G grow)
figures     rebuild every report figure (PNG, SVG, PDF) and an index into a folder
notebooks   execute the notebook series into a folder, their figures beside them
trap-page   write notebook 01's trap lesson as one static HTML page: sliders, no kernel, no network
book        the book: a home page, one page per executed notebook, the trap lesson and the report figures,
            linked and readable offline (``--executed DIR`` reuses the notebooks' executed copies)
battery     the evidence battery: every estimator's update against the exact gradient, and the
            recommendation per situation that a stated rule derives from it
diagnose    a reward log or a TRL / verl run folder: zero-std and MAD-zero groups, outliers, each reward
            function, the logged advantages against each estimator, estimator disagreement, advice
simulate    run the drift simulator from a JSON config: the record (Parquet) and its figure
sweep       run a declared grid of simulations or metrics x seeds (in-process or on Ray) into a
            Parquet record; ``sweep status DIR`` says what is done, failed and missing
experiment  real trainer runs: ``experiment trl CONFIG --out DIR`` runs a sweep of TRL's trainer on a
            tiny model under contaminated judges, then prints where each arm ends;
            ``experiment trl_composite CONFIG --out DIR`` the same with multi-token answers and a
            composite reward

A user error (a malformed reward log, a bad setting, a mistyped option)
prints one line on stderr and exits with status 2, without a traceback.
Everything printed passes :func:`~robustgrpo.lab.files.terminal_text`: text from
a file (group ids, names, error messages quoting it) cannot clear the screen or
set the terminal's title. Negative numbers are values, not options
(``--reward-range -1e3 1``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from robustgrpo.lab.catalogue import describe_estimators
from robustgrpo.checks import did_you_mean
from robustgrpo.lab.params import check_seed, flags_for_settings
from robustgrpo.lab.files import make_folder, terminal_text
from robustgrpo.lab.machine import CONNECT_TIMEOUT, MAX_CELLS, check_threads

__all__ = ["main", "console", "build_parser"]

PROG = "python -m robustgrpo"
#: The extra that brings each package the lab's and the book's commands import (the core has torch and numpy only).
_EXTRA_OF = {**dict.fromkeys(("scipy", "pandas", "tqdm", "pyarrow"), "lab"), "matplotlib": "plots",
             **dict.fromkeys(("plotly", "ipywidgets", "anywidget", "jupyterlab", "nbclient", "nbformat", "latex2mathml",
                              "kaleido"), "book"),
             "trl": "trl", "verl": "verl", "ray": "sweep"}
#: The extras each command needs beside the core (diagnose: ``plots`` too with --html; bench: by its table).
_COMMAND_EXTRAS = {"demo": ("lab", "book"), "figures": ("lab", "book"), "notebooks": ("lab", "book"),
                   "trap-page": ("lab", "book"), "book": ("lab", "book"),
                   "battery": ("lab",), "diagnose": ("lab",), "simulate": ("lab", "plots"), "sweep": ("lab",),
                   "experiment": ("lab", "trl"), "bench": ("lab",)}


def _extras_needed(args: argparse.Namespace, missing: str) -> str | None:
    """The extras to install for ``args.command``, the missing package's among them; None for a package of no extra."""
    extra = _EXTRA_OF.get(missing)
    if extra is None:
        return None
    needed = [*_COMMAND_EXTRAS.get(args.command, ()), *(("plots",) if getattr(args, "html", None) else ())]
    covered = set(needed) | ({"plots"} if "book" in needed else set())  # (the book draws with matplotlib too)
    return ",".join(dict.fromkeys([*needed, *([extra] if extra not in covered else [])]))


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (status 2).

    argparse's own ``error`` prints the whole usage block first; here the
    usage is one ``--help`` away, named in the line.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # argparse takes '-1e3' and '-inf' for options; numbers in any float notation are values here
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        message = " ".join(message.split())
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:  # argparse lists the choices; name the closest
            message += did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        self.exit(2, terminal_text(f"{self.prog}: error: {message} (see {self.prog} --help)\n"))

    def options(self) -> list[str]:
        """Every option this parser takes, by its long name."""
        return [max(a.option_strings, key=len) for a in self._actions if a.option_strings]


_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def _say(text: str = "", *, file=None) -> None:
    """Print ``text`` with every control character but tab and newline escaped (see the module docstring)."""
    print(terminal_text(str(text)), file=file or sys.stdout, flush=True)


def _cmd_demo(args: argparse.Namespace) -> int:
    from robustgrpo.book.outlier_poisoning.report import demo_text

    _say(demo_text())
    return 0


def _json(document: dict) -> str:
    """A command's ``--json`` output: one JSON document, no NaN or infinity (they are null)."""
    return json.dumps(document, indent=1, allow_nan=False, ensure_ascii=False)


def _estimators_json() -> dict:
    """The catalogue as ``estimators --json`` writes it (``robustgrpo/schemas/estimators.schema.json``)."""
    from robustgrpo import __version__
    from robustgrpo.advantages import ESTIMATORS

    return {"schema": "estimators.schema.json", "robustgrpo_version": __version__, "estimators": [
        {"name": e.name, "summary": e.summary, "source": e.source, "verl_name": f"robustgrpo_{e.name}",
         "parameters": [{"name": p.name, "default": p.default, "description": p.description} for p in e.parameters],
         "clip": e.clip, "scaling": e.scaling, "bounded": e.bounded, "batch_level": e.batch_level,
         "order_based": e.order_based, "breakdown": e.breakdown.note}
        for e in ESTIMATORS.values()]}


def _cmd_estimators(args: argparse.Namespace) -> int:
    _say(_json(_estimators_json()) if args.json else describe_estimators())
    return 0


def _shape(text: str) -> tuple[int, int]:
    try:
        b, g = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must look like 65536x16, got {text!r}") from None
    if b < 1 or g < 1:
        raise argparse.ArgumentTypeError(f"shape sizes must be positive, got {text!r}")
    return b, g


def _cmd_bench(args: argparse.Namespace) -> int:
    from robustgrpo.bench import (
        DEFAULT_SHAPES,
        format_dashboard_table,
        format_table,
        run_benchmark,
        run_dashboard_benchmark,
    )

    if args.malloc is not None:
        from robustgrpo.bench._common import pin_allocator

        _say(pin_allocator(args.malloc))
    if args.threads is not None and not (args.dashboard or args.lessons):
        raise ValueError("--threads applies to --dashboard and --lessons only (the estimator table times 1 thread "
                         "and torch's default, --simulate 1 and 2)")
    if args.dashboard or args.lessons:
        from robustgrpo.bench import format_lessons_table, run_lessons_benchmark
        from robustgrpo.lab.simulate.runner import torch_threads

        with torch_threads(args.threads):  # (None: torch's own count)
            if args.dashboard:
                _say(format_dashboard_table(run_dashboard_benchmark(repeats=args.repeats, progress=not args.no_progress)))
            else:
                _say(format_lessons_table(run_lessons_benchmark(repeats=args.repeats, progress=not args.no_progress)))
        return 0
    if args.sweep:
        from robustgrpo.bench import format_sweep_table, run_sweep_benchmark

        _say(format_sweep_table(run_sweep_benchmark(progress=not args.no_progress)))
        return 0
    if args.trainer:
        from robustgrpo.bench import format_trainer_table, run_trainer_benchmark

        _say(format_trainer_table(run_trainer_benchmark(progress=not args.no_progress)))
        return 0
    if args.scaling:
        from robustgrpo.bench import format_scaling_table, run_scaling_benchmark

        _say(format_scaling_table(run_scaling_benchmark(repeats=min(args.repeats, 3), progress=not args.no_progress)))
        return 0
    if args.adapters:
        from robustgrpo.bench import format_adapter_table, run_adapter_benchmark

        _say(format_adapter_table(run_adapter_benchmark(repeats=args.repeats, progress=not args.no_progress)))
        return 0
    if args.battery:
        from robustgrpo.bench import format_simulate_table, run_battery_benchmark

        _say(format_simulate_table(run_battery_benchmark(progress=not args.no_progress)))
        return 0
    if args.simulate:
        from robustgrpo.bench import format_simulate_table, run_simulate_benchmark

        _say(format_simulate_table(run_simulate_benchmark(progress=not args.no_progress)))
        return 0
    shapes = args.shapes or list(DEFAULT_SHAPES)
    rows = run_benchmark(shapes=shapes, repeats=args.repeats, progress=not args.no_progress)
    _say(format_table(rows))
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from robustgrpo.book.figures import build_all

    built = build_all(args.out, formats=args.formats, names=args.only, progress=not args.no_progress)
    for rf, spec, paths in built:
        _say(f"{rf.name:<36} {spec.notebook:<36} {' '.join(p.suffix[1:] for p in paths)}")
    _say(f"{len(built)} figures and index.md written to {Path(args.out).resolve()}")
    return 0


def _cmd_notebooks(args: argparse.Namespace) -> int:
    from robustgrpo.book.execute import run_all

    runs = run_all(args.out, notebooks=args.only, timeout=args.timeout, progress=not args.no_progress,
                   update_prose=args.update_prose)
    for run in runs:
        _say(f"{run.source.name:<40} {run.seconds:6.1f} s  -> {run.executed} (to read without code: {run.executed.with_suffix('.html').name})")
        for line in run.updated:
            _say(f"  prose updated, {line}")
    _say(f"{len(runs)} notebooks executed; figures in {(Path(args.out) / 'figures').resolve()}")
    return 0


def _cmd_trap_page(args: argparse.Namespace) -> int:
    from robustgrpo.book.trap_page import write_trap_page

    path = write_trap_page(args.out)
    _say(f"the trap lesson, {path.stat().st_size / 1e6:.1f} MB, written to {path.resolve()}")
    return 0


def _cmd_book(args: argparse.Namespace) -> int:
    from robustgrpo.book.site import build_book

    pages = build_book(args.out, executed=args.executed, report=args.report, trap_page=args.trap_page,
                       timeout=args.timeout, progress=not args.no_progress)
    for page in pages:
        _say(f"{page.relative_to(pages[0].parent)}")
    _say(f"{len(pages)} pages written; open {pages[0].resolve()}")
    return 0


def _cmd_battery(args: argparse.Namespace) -> int:
    from robustgrpo.lab.simulate.runner import torch_threads

    if args.write and args.quick:
        raise ValueError("--write ships the full battery; drop --quick")
    out = make_folder(args.out) if args.out else None
    with torch_threads(1):  # (small tensors: one thread, and no thread pool fighting other work for the cores)
        _battery(args.quick, out, args.write, not args.no_progress)
    return 0


def _battery(quick: bool, out: Path | None, write: bool, progress: bool) -> None:
    """The battery command's work: run, print the rule's answer on both yardsticks, write what was asked."""
    import json
    import time

    from robustgrpo.advantages import RECOMMENDATION_FILE
    from robustgrpo.lab.metrics.battery import (CHECK, FULL, QUICK, RULE_COLUMNS, battery_file, format_recommendations,
                                                recommend, recommendation_record, run_battery)
    from robustgrpo.lab.simulate.training import format_training, hard_prompt_training, training_file

    start = time.perf_counter()
    table = run_battery(**(QUICK if quick else FULL), progress=progress)
    seconds = time.perf_counter() - start
    recommendations = recommend(table)
    normalized = recommend(table, metric="cosine_normalized")
    _say(format_recommendations(recommendations))
    _say("\nthe same rule on the per-prompt normalised gradient:")
    _say(format_recommendations(normalized))
    _say(f"\n{len(table)} rows ({table.groupby(['family', 'G']).ngroups} cells x estimators x draws, declared or not) "
         f"in {seconds:.0f} s")
    if out is not None:
        table.to_parquet(out / "battery.parquet", index=False)
        recommendations.to_csv(out / "recommendations.csv", index=False)
        _say(f"written: {out / 'battery.parquet'}, {out / 'recommendations.csv'}")
    if write:
        training = hard_prompt_training()
        _say("\n" + format_training(training))
        check = run_battery(**CHECK, progress=progress)
        same = recommend(check)["method"].tolist() == recommendations["method"].tolist()
        _say(f"\na second set of problem draws (seed {CHECK['seed']}) recommends "
             + ("the same in every situation" if same else "otherwise:\n" + format_recommendations(recommend(check))))
        make_folder(battery_file().parent)
        table.to_parquet(battery_file(), index=False)
        check[RULE_COLUMNS].to_parquet(battery_file(check=True), index=False)
        training.to_parquet(training_file(), index=False)
        record = recommendation_record(recommendations, normalized, recommend(check, metric="cosine_normalized"))
        RECOMMENDATION_FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        _say(f"shipped: {battery_file()}, {battery_file(check=True)}, {training_file()}, {RECOMMENDATION_FILE}")


def _column(text: str) -> tuple[str, str]:
    field, sep, column = text.partition("=")
    if not sep or not field or not column:
        raise argparse.ArgumentTypeError(f"--column must look like group=prompt_id, got {text!r}")
    return field, column


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from robustgrpo.lab.diagnose import diagnose, diagnose_run
    from robustgrpo.lab.runlogs import RunLog, check_output_path, load_log

    if args.html is not None:  # refused before the work: empty, a folder, a link, a file read, a missing or
        page = check_output_path(args.file, args.html, force=args.force)  # unwritable folder, an existing file
    elif args.force:
        raise ValueError("--force applies to --html (replace an existing page); add --html OUT")
    log = load_log(args.file, columns=dict(args.column or []), skip_bad=args.skip_bad, group_size=args.group_size,
                   reward_weights=args.reward_weights)
    if isinstance(log, RunLog) and args.reward_fn is None:
        diagnosis = diagnose_run(log, reward_range=args.reward_range, reward_kind=args.reward_kind)
    else:
        diagnosis = diagnose(log, reward_range=args.reward_range, reward_fn=args.reward_fn, reward_kind=args.reward_kind)
    _say(_json(diagnosis.to_json()) if args.json else diagnosis.text())
    if args.html is not None:
        from robustgrpo.book.your_rewards.report import write_diagnosis_html

        page = write_diagnosis_html(diagnosis, page, force=args.force, inputs=log.files if isinstance(log, RunLog) else [args.file])
        _say(f"{'' if args.json else chr(10)}HTML report: {page.resolve()}", file=sys.stderr if args.json else None)
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from robustgrpo.book.style import save_figure
    from robustgrpo.book.policy_gradient_drift.report import simulation_figure
    from robustgrpo.lab.simulate import SimConfig, simulate

    from robustgrpo.lab.files import check_output_file
    from robustgrpo.lab.machine import check_estimate

    config = SimConfig.from_file(args.config)  # a bad config is a ValueError: main() prints it on one line
    if len(args.seeds) == 1:
        check_estimate(config.estimate(max(args.seeds[0], 1)), yes=args.yes, flag="--yes")  # before a list of 10**12 seeds
        seeds = list(range(args.seeds[0]))
    else:
        seeds = args.seeds
    if len(seeds) != len(set(seeds)):
        raise ValueError(f"--seeds must be distinct, got {args.seeds}")
    if not seeds:
        raise ValueError("--seeds 0 runs nothing; pass a count >= 1 or the seeds to run")
    check_estimate(config.estimate(len(seeds)), yes=args.yes, flag="--yes")
    out = make_folder(args.out)
    for name in ("record.parquet", "config.json"):  # the command's own outputs, rewritten by a rerun; never its input
        check_output_file(out / name, inputs=[args.config], force=True)
    frame = simulate(config, seeds, progress=not args.no_progress)
    record = out / "record.parquet"
    frame.to_parquet(record, index=False)
    config.to_file(out / "config.json")
    rf = simulation_figure(frame, config)
    paths = save_figure(rf.figure, out, rf.name, ("png", "svg"))
    _say(f"{len(frame)} rows ({config.steps} steps x {len(seeds)} seeds x {len(config.estimators)} estimators) -> {record}")
    _say(f"figure: {', '.join(str(p) for p in paths)}")
    _say(rf.caption)
    return 0


def _seed_spec(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers, got {text[:40]!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"seeds must be >= 0, got {value}")
    try:
        return check_seed(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers in [0, 2**63), got {value}") from None


def _integer_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text[:40]!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if value >= 2**63:
            raise argparse.ArgumentTypeError(f"must be below 2**63, got {value}")
        return value

    return parse


_positive = _integer_at_least(1)
_non_negative = _integer_at_least(0)


def _threads(text: str) -> int:
    """A thread or CPU count of this machine: 1 .. os.cpu_count() (more crashes torch's thread pool)."""
    value = _positive(text)
    try:
        return check_threads("the count", value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("the count ")) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text[:40]!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text[:40]!r}")
    return value


def _cmd_sweep(args: argparse.Namespace) -> int:
    import dataclasses

    from robustgrpo.lab.sweep import format_status, load_sweep, make_engine, run_sweep, sweep_status

    if args.target[0] == "status":
        if len(args.target) != 2:
            raise ValueError("usage: sweep status DIR (the --out folder of a sweep)")
        status = sweep_status(args.target[1])
        _say(_json(status.to_json()) if args.json else format_status(status))
        return 0
    if args.json:
        raise ValueError("--json applies to sweep status DIR; a sweep prints its progress and summary")
    if len(args.target) != 1:
        raise ValueError(f"sweep takes one CONFIG file, got {args.target} (or: sweep status DIR)")
    if args.out is None:
        raise ValueError("sweep CONFIG needs --out DIR, the folder of its record")
    engine = make_engine(args.engine, address=args.address, batch_size=args.batch_size, retries=args.retries,
                         num_cpus=args.num_cpus, connect_timeout=args.connect_timeout)
    sweep = load_sweep(args.target[0], max_cells=None if args.yes else MAX_CELLS)
    if args.cpus_per_cell is not None:
        sweep = dataclasses.replace(sweep, cpus_per_cell=args.cpus_per_cell)
    options = {"allow_remote_reporting": True} if args.allow_remote_reporting else {}
    if options and "allow_remote_reporting" not in sweep.runnable.run_options:
        raise ValueError(f"--allow-remote-reporting applies to trainer runs (the trl runnable), not to {sweep.name!r}")
    _say(f"{sweep.name}: {len(sweep.cells)} cells (of {sweep.n_points} declared points: grid x draws x seeds), "
         f"{sweep.cpus_per_cell} CPU(s) per cell, {engine.name} engine -> {Path(args.out).resolve()}")
    try:
        result = run_sweep(sweep, args.out, engine, progress=not args.no_progress, yes=args.yes, options=options)
    except KeyboardInterrupt:
        _say(f"interrupted: every finished cell is kept in {args.out}; rerun the same command to continue",
              file=sys.stderr)
        return 130
    _say(result.summary())
    if result.failed:
        _say("failed cells (their errors are in failures/; rerun the same command to retry them):")
        for f in result.failed:
            _say(f"  {f['id']}  {f['label']}: {f['error']}")
        return 1
    return 0


def _cmd_experiment(args: argparse.Namespace) -> int:
    from robustgrpo.lab.sweep import load_record, load_sweep

    name = load_sweep(args.config, max_cells=None).name  # (the size is checked by the sweep below)
    if name != args.trainer:
        raise ValueError(f"{args.config} is a sweep of the {name!r} runnable; experiment {args.trainer} runs a config whose "
                         f'"runnable" is "{args.trainer}" (run other sweeps with: sweep CONFIG --out DIR)')
    args.target = [args.config]
    status = _cmd_sweep(args)
    if status in (0, 1) and len(table := load_record(args.out, partial=True)):  # every run finished, or some failed
        from robustgrpo.book.real_trainer import report

        _say()
        if table.attrs.get("unfinished"):
            _say(f"(the table leaves out {table.attrs['unfinished']} run(s) that have not finished)")
        if args.trainer == "trl":
            _say(report.format_final_table(report.final_table(table)))
        elif "model" in table.columns:  # a pretrained model's runs: their held-out greedy evaluation
            from robustgrpo.book.real_trainer import realmodel

            _say(realmodel.real_model_text(table))
        else:
            from robustgrpo.book.composite_reward import report as composite

            _say(composite.format_composite_table(composite.composite_final_table(report.composite_record(table))))
    return status


def _add_engine_options(parser: argparse.ArgumentParser, unit: str) -> None:
    """The options of a command that runs a sweep's cells (each a ``unit``) on the local or the Ray engine."""
    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help=f"local: in this process (default); ray: one Ray task per {unit}")
    parser.add_argument("--address", help="Ray cluster: auto, ray://HOST:PORT or HOST:PORT (default: start a local instance)")
    parser.add_argument("--num-cpus", type=_threads, help="CPUs of the local Ray instance (default and most: this machine's)")
    parser.add_argument("--cpus-per-cell", type=_positive,
                        help=f"CPUs (torch threads) per {unit} (default: the config's, else 1; at most this machine's, "
                             "or a Ray node's)")
    parser.add_argument("--retries", type=_non_negative, default=3, help=f"ray engine: reruns of a {unit} whose worker died")
    parser.add_argument("--connect-timeout", type=_seconds, default=CONNECT_TIMEOUT, metavar="SECONDS",
                        help=f"ray engine with --address: seconds the cluster has to answer (default {CONNECT_TIMEOUT:g})")
    parser.add_argument("--yes", action="store_true",
                        help=f"run even a sweep of more than {MAX_CELLS:,} cells, or with a {unit} estimated beyond this "
                             "machine (more memory than it has, or more than a day)")
    parser.add_argument("--allow-remote-reporting", action="store_true",
                        help="trainer runs: allow report_to reporters other than tensorboard (wandb, mlflow...), which "
                             "may send the runs' data over the network")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The argument parser of ``python -m robustgrpo`` (or of the console script, ``prog="robustgrpo"``)."""
    from robustgrpo import __version__

    parser = _OneLineParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"robustgrpo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices  # each command's parser, by name
    sub.add_parser("demo", help="seed 000's poisoned group through every estimator").set_defaults(func=_cmd_demo)
    estimators = sub.add_parser("estimators", help="list the estimator catalogue")
    estimators.add_argument("--json", action="store_true",
                            help="print the catalogue as JSON (schema: robustgrpo/schemas/estimators.schema.json)")
    estimators.set_defaults(func=_cmd_estimators)
    bench = sub.add_parser("bench", help="time the estimators (prints a table)")
    bench.add_argument("--shapes", type=_shape, nargs="+", metavar="BxG", help="shapes to time (default 65536x16 4096x256)")
    bench.add_argument("--repeats", type=_positive, default=7, help="timed calls per case (median reported)")
    bench.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    bench.add_argument("--dashboard", action="store_true",
                       help="time the dashboard's slider moves at G=256 with 10^4 groups and notebook 03's heat-map sweep")
    bench.add_argument("--threads", type=_threads,
                       help="torch threads for --dashboard and --lessons (default: torch's own count; on cores that "
                            "other work shares, 1 avoids the collapse of torch's thread pool)")
    bench.add_argument("--lessons", action="store_true",
                       help="time every control of the live lessons of notebooks 01, 02 and 04 at their largest sizes")
    bench.add_argument("--simulate", action="store_true",
                       help="time the drift simulator (256 prompts x G=16 x 500 steps x 8 seeds) and the notebook 05 dashboard's rerun")
    bench.add_argument("--battery", action="store_true",
                       help="time the evidence battery at its quick and its full settings, at one torch thread")
    bench.add_argument("--sweep", action="store_true",
                       help="time the sweep engines: per-cell overhead and cells per second, local and Ray")
    bench.add_argument("--trainer", action="store_true",
                       help="time real TRL trainer steps per estimator and the estimator's share of a step (needs trl)")
    bench.add_argument("--scaling", action="store_true",
                       help="time every estimator as B and G grow (ns per reward) and probe its peak memory")
    bench.add_argument("--adapters", action="store_true",
                       help="time the verl adapter on verl's layout (token-level rewards, string uids) against the "
                            "idiomatic grpo")
    bench.add_argument("--malloc", choices=["fresh", "reuse"],
                       help="pin glibc's allocator thresholds for the run (Linux): 'fresh' makes every large temporary "
                            "pay its page faults, 'reuse' lets it reuse memory; by default glibc moves them as it goes, "
                            "and ratios move with them")
    bench.set_defaults(func=_cmd_bench)
    figures = sub.add_parser("figures", help="rebuild every report figure into a folder")
    figures.add_argument("--out", required=True, help="folder to write the figures and index.md into")
    figures.add_argument("--formats", nargs="+", default=["png", "svg", "pdf"], choices=["png", "svg", "pdf"])
    figures.add_argument("--only", nargs="+", metavar="NAME", help="build only these figures")
    figures.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    figures.set_defaults(func=_cmd_figures)
    notebooks = sub.add_parser("notebooks", help="execute the notebooks into a folder")
    notebooks.add_argument("--out", required=True, help="folder for executed notebooks (notebooks/) and figures (figures/)")
    notebooks.add_argument("--only", nargs="+", metavar="NAME",
                           help="execute only these notebooks (a path, or a name such as 01_outlier_poisoning)")
    notebooks.add_argument("--timeout", type=_positive, default=600, help="seconds allowed per cell")
    notebooks.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    notebooks.add_argument("--update-prose", action="store_true",
                           help="also write the values this run computed into the prose of the notebook files")
    notebooks.set_defaults(func=_cmd_notebooks)
    trap_page = sub.add_parser("trap-page", help="write the trap lesson as a static HTML page (no kernel) into a folder")
    trap_page.add_argument("--out", required=True, help="folder to write trap_lesson.html into")
    trap_page.set_defaults(func=_cmd_trap_page)
    book = sub.add_parser("book", help="build the book (home page, chapters, trap lesson, report figures) into a folder")
    book.add_argument("--out", required=True, help="folder to write the book into (index.html is its home page)")
    book.add_argument("--executed", metavar="DIR",
                      help="the executed notebooks (DIR/notebooks of 'notebooks --out DIR'); without it they run here")
    book.add_argument("--report", metavar="DIR", help="the report figures ('figures --out DIR'); without it they are built here")
    book.add_argument("--trap-page", metavar="FILE", help="trap_lesson.html as 'trap-page' wrote it; without it it is written here")
    book.add_argument("--timeout", type=_positive, default=600, help="seconds allowed per cell when the notebooks run here")
    book.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    book.set_defaults(func=_cmd_book)
    battery = sub.add_parser("battery", help="run the evidence battery and print the recommendation per situation")
    battery.add_argument("--quick", action="store_true",
                         help="G = 8, 16, 2 problem draws and 16 seeds instead of G = 2..64, 5 draws and 32 seeds")
    battery.add_argument("--out", metavar="DIR", help="also write battery.parquet and recommendations.csv into DIR")
    battery.add_argument("--write", action="store_true",
                         help="ship the result: data/evidence/battery.parquet, a second set of draws "
                              "(battery_check.parquet), the training check (training.parquet) and "
                              "robustgrpo/recommendation.json")
    battery.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    battery.set_defaults(func=_cmd_battery)
    diag = sub.add_parser("diagnose", help="diagnose a reward log (CSV, JSON Lines, Parquet) or a TRL / verl run folder "
                                           "and recommend an estimator")
    diag.add_argument("file", help="reward log (one row per sample with step, group (prompt id), reward), or a run folder: "
                                   "TRL's output_dir (log_completions=True) or verl's trainer.rollout_data_dir")
    diag.add_argument("--reward-range", type=float, nargs=2, metavar=("LO", "HI"), help="flag rewards outside [LO, HI]")
    diag.add_argument("--reward-fn", metavar="NAME", help="the reward function to diagnose when the log holds several")
    diag.add_argument("--reward-kind", choices=["binary", "composite", "continuous", "any"],
                      help="what the rewards are, for the recommendation (default: binary if they take two values, else any)")
    diag.add_argument("--column", type=_column, action="append", metavar="FIELD=NAME",
                      help="the file's column for a field (step, group, reward, reward_fn, length), e.g. group=question_id")
    diag.add_argument("--skip-bad", action="store_true", help="skip malformed rows and say how many and why, instead of stopping")
    diag.add_argument("--group-size", type=_integer_at_least(1), metavar="N",
                      help="a run's group size: TRL's num_generations, verl's actor_rollout_ref.rollout.n (default: inferred)")
    diag.add_argument("--reward-weights", type=float, nargs="+", metavar="W",
                      help="a TRL run's reward_weights, one per reward function (default: 1 each)")
    diag.add_argument("--html", metavar="OUT",
                      help="also write a self-contained HTML report with figures, a new file in an existing folder "
                           "(never the log itself, never through a symbolic link)")
    diag.add_argument("--force", action="store_true", help="with --html: replace an existing file")
    diag.add_argument("--json", action="store_true",
                      help="print the diagnosis as JSON instead of text, every step and outlier in full (schema: "
                           "robustgrpo/schemas/diagnose.schema.json); the exit status stays 0, gate on its fields")
    diag.set_defaults(func=_cmd_diagnose)
    simulate = sub.add_parser("simulate", help="run the drift simulator from a JSON config")
    simulate.add_argument("config", help="JSON config file (robustgrpo.lab.simulate.SimConfig.to_file writes one)")
    simulate.add_argument("--out", required=True, help="folder for record.parquet, config.json and the figure")
    simulate.add_argument("--seeds", type=_seed_spec, nargs="+", default=[10], metavar="N",
                          help="one number: that many seeds (0 .. N-1); several: those seeds (default 10)")
    simulate.add_argument("--yes", action="store_true",
                          help="run even when the run is estimated beyond this machine (more memory than it has, or "
                               "more than a day)")
    simulate.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    simulate.set_defaults(func=_cmd_simulate)
    sweep = sub.add_parser("sweep", help="run a sweep config into a Parquet record (or: sweep status DIR)",
                           usage=f"{prog} sweep CONFIG --out DIR [--engine {{local,ray}}] [--address ADDRESS] ...\n"
                                 f"       {prog} sweep status DIR")
    sweep.add_argument("target", nargs="+", metavar="CONFIG | status DIR",
                       help="a sweep's JSON config (README: Sweeps), or 'status' and a record folder")
    sweep.add_argument("--out", metavar="DIR", help="the record folder; a rerun into it skips finished cells")
    _add_engine_options(sweep, "cell")
    sweep.add_argument("--batch-size", type=_positive, default=16, help="local engine: most seeds per vectorized call")
    sweep.add_argument("--json", action="store_true",
                       help="sweep status: print the status as JSON, every cell listed (schema: "
                            "robustgrpo/schemas/sweep_status.schema.json)")
    sweep.set_defaults(func=_cmd_sweep)
    experiment = sub.add_parser("experiment", help="real trainer runs as a sweep: experiment trl CONFIG --out DIR",
                                usage=f"{prog} experiment {{trl,trl_composite}} CONFIG --out DIR [--engine {{local,ray}}] "
                                      "[--address ADDRESS] ...")
    experiment.add_argument("trainer", choices=["trl", "trl_composite"],
                            help="the runs: trl (TRL's GRPOTrainer through robustgrpo.integrations.trl, one-token answers), "
                                 "trl_composite (multi-token answers, a composite reward)")
    experiment.add_argument("config", help='a sweep config whose "runnable" is that name (e.g. '
                                           'data/sweeps/trl_contamination.json, data/sweeps/trl_composite.json)')
    experiment.add_argument("--out", required=True, metavar="DIR", help="the record folder; a rerun into it skips finished runs")
    _add_engine_options(experiment, "run")
    experiment.set_defaults(func=_cmd_experiment, batch_size=1, json=False)
    return parser


#: Python keywords whose command-line flag is not the keyword's own name (``columns`` is ``--column``).
_FLAG_OF_KEYWORD = {"columns": "column"}


def _flags(command: _OneLineParser) -> dict[str, str]:
    """Each keyword a message may name (:func:`~robustgrpo.lab.params.setting`) -> the command's flag for it."""
    flags = {a.dest: max(a.option_strings, key=len) for a in command._actions if a.option_strings}
    return {**flags, **{kw: flags[dest] for kw, dest in _FLAG_OF_KEYWORD.items() if dest in flags}}


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Entry point of ``python -m robustgrpo`` (and, as ``prog="robustgrpo"``, of the ``robustgrpo`` console script);
    returns the exit status."""
    parser = build_parser(prog)
    args, extras = parser.parse_known_args(argv)
    command = parser.commands[args.command]
    if extras:  # argparse's own message names none of the options; name the closest and every one
        unknown = next((e.split("=")[0] for e in extras if e.startswith("-")), None)
        hint = (f"{did_you_mean(unknown, command.options()) or ';'} {args.command}'s options: "
                f"{', '.join(command.options())}" if unknown else "")
        command.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
    try:
        with flags_for_settings(_flags(command)):
            return args.func(args)
    except ModuleNotFoundError as err:  # the core alone: a command of the lab or the book
        extras = _extras_needed(args, (err.name or "").split(".")[0])
        if extras is None:
            raise
        print(f"{parser.prog} {args.command}: error: this command needs the {extras} extra{'s' * (',' in extras)} "
              f"({err.name} is not installed): in a clone of robustgrpo, pip install -e '.[{extras}]'", file=sys.stderr)
        return 2
    except (ValueError, OSError) as err:  # user errors: one line, no traceback
        _say(f"{parser.prog} {args.command}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except MemoryError:  # the estimates refuse what is far too large; this is what they did not foresee
        _say(f"{parser.prog} {args.command}: error: out of memory; make the run smaller", file=sys.stderr)
        return 2


def console() -> int:
    """The ``robustgrpo`` console script (``pip`` installs it): :func:`main`, named as itself in its messages."""
    return main(prog="robustgrpo")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
