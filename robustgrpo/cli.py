"""Command line: ``python -m robustgrpo <command>``.

Commands
--------
demo        seed 000's poisoned group through every estimator, next to the clean group
estimators  the catalogue: names, formulas, parameters
bench       time every estimator against idiomatic grpo and numpy + scipy (--trainer: inside TRL's trainer)
figures     rebuild every report figure (PNG, SVG, PDF) and an index into a folder
notebooks   execute the notebook series into a folder, their figures beside them
diagnose    a reward log or a TRL / verl run folder: zero-std and MAD-zero groups, outliers, each reward
            function, the logged advantages against each estimator, estimator disagreement, advice
simulate    run the drift simulator from a JSON config: the record (Parquet) and its figure
sweep       run a declared grid of simulations or metrics x seeds (in-process or on Ray) into a
            Parquet record; ``sweep status DIR`` says what is done, failed and missing
experiment  real trainer runs: ``experiment trl CONFIG --out DIR`` runs a sweep of TRL's trainer on a
            tiny model under contaminated judges, then prints where each arm ends

A user error (a malformed reward log, a bad setting, a mistyped option)
prints one line on stderr and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from .advantages import describe_estimators
from .checks import make_folder

__all__ = ["main", "build_parser"]

PROG = "python -m robustgrpo"


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (status 2).

    argparse's own ``error`` prints the whole usage block first; here the
    usage is one ``--help`` away, named in the line.
    """

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _cmd_demo(args: argparse.Namespace) -> int:
    from .report.seed import demo_text

    print(demo_text())
    return 0


def _cmd_estimators(args: argparse.Namespace) -> int:
    print(describe_estimators())
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
    from .bench import (
        DEFAULT_SHAPES,
        format_dashboard_table,
        format_table,
        run_benchmark,
        run_dashboard_benchmark,
    )

    if args.threads is not None and not (args.dashboard or args.lessons):
        raise ValueError("--threads applies to --dashboard and --lessons only (the estimator table times 1 thread "
                         "and torch's default, --simulate 1 and 2)")
    if args.dashboard or args.lessons:
        from .bench import format_lessons_table, run_lessons_benchmark
        from .simulate.runner import torch_threads

        with torch_threads(args.threads):  # (None: torch's own count)
            if args.dashboard:
                print(format_dashboard_table(run_dashboard_benchmark(repeats=args.repeats, progress=not args.no_progress)))
            else:
                print(format_lessons_table(run_lessons_benchmark(repeats=args.repeats, progress=not args.no_progress)))
        return 0
    if args.sweep:
        from .bench import format_sweep_table, run_sweep_benchmark

        print(format_sweep_table(run_sweep_benchmark(progress=not args.no_progress)))
        return 0
    if args.trainer:
        from .bench import format_trainer_table, run_trainer_benchmark

        print(format_trainer_table(run_trainer_benchmark(progress=not args.no_progress)))
        return 0
    if args.simulate:
        from .bench import format_simulate_table, run_simulate_benchmark

        print(format_simulate_table(run_simulate_benchmark(progress=not args.no_progress)))
        return 0
    shapes = args.shapes or list(DEFAULT_SHAPES)
    rows = run_benchmark(shapes=shapes, repeats=args.repeats, progress=not args.no_progress)
    print(format_table(rows))
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from .report import build_all

    built = build_all(args.out, formats=args.formats, names=args.only, progress=not args.no_progress)
    for rf, spec, paths in built:
        print(f"{rf.name:<36} {spec.notebook:<36} {' '.join(p.suffix[1:] for p in paths)}")
    print(f"{len(built)} figures and index.md written to {Path(args.out).resolve()}")
    return 0


def _cmd_notebooks(args: argparse.Namespace) -> int:
    from .execute import run_all

    runs = run_all(args.out, notebooks=args.only, timeout=args.timeout, progress=not args.no_progress)
    for run in runs:
        print(f"{run.source.name:<40} {run.seconds:6.1f} s  -> {run.executed}")
    print(f"{len(runs)} notebooks executed; figures in {(Path(args.out) / 'figures').resolve()}")
    return 0


def _column(text: str) -> tuple[str, str]:
    field, sep, column = text.partition("=")
    if not sep or not field or not column:
        raise argparse.ArgumentTypeError(f"--column must look like group=prompt_id, got {text!r}")
    return field, column


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from .diagnose import diagnose, diagnose_run
    from .runlogs import RunLog, load_log

    log = load_log(args.file, columns=dict(args.column or []), skip_bad=args.skip_bad, group_size=args.group_size,
                   reward_weights=args.reward_weights)
    if isinstance(log, RunLog) and args.reward_fn is None:
        run = diagnose_run(log, reward_range=args.reward_range)
        print(run.text())
        diagnosis = run.total
    else:
        diagnosis = diagnose(log, reward_range=args.reward_range, reward_fn=args.reward_fn)
        print(diagnosis.text())
    if args.html:
        from .report.diagnose import write_diagnosis_html

        print(f"\nHTML report: {write_diagnosis_html(diagnosis, args.html).resolve()}")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from .plots import save_figure
    from .report.drift import simulation_figure
    from .simulate import SimConfig, simulate

    config = SimConfig.from_file(args.config)  # a bad config is a ValueError: main() prints it on one line
    seeds = list(range(args.seeds[0])) if len(args.seeds) == 1 else args.seeds
    if len(seeds) != len(set(seeds)):
        raise ValueError(f"--seeds must be distinct, got {args.seeds}")
    out = make_folder(args.out)
    frame = simulate(config, seeds, progress=not args.no_progress)
    record = out / "record.parquet"
    frame.to_parquet(record, index=False)
    config.to_file(out / "config.json")
    rf = simulation_figure(frame, config)
    paths = save_figure(rf.figure, out, rf.name, ("png", "svg"))
    print(f"{len(frame)} rows ({config.steps} steps x {len(seeds)} seeds x {len(config.estimators)} estimators) -> {record}")
    print(f"figure: {', '.join(str(p) for p in paths)}")
    print(rf.caption)
    return 0


def _seed_spec(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"seeds must be >= 0, got {value}")
    return value


def _integer_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive = _integer_at_least(1)
_non_negative = _integer_at_least(0)


def _cmd_sweep(args: argparse.Namespace) -> int:
    import dataclasses

    from .sweep import format_status, load_sweep, make_engine, run_sweep, sweep_status

    if args.target[0] == "status":
        if len(args.target) != 2:
            raise ValueError("usage: sweep status DIR (the --out folder of a sweep)")
        print(format_status(sweep_status(args.target[1])))
        return 0
    if len(args.target) != 1:
        raise ValueError(f"sweep takes one CONFIG file, got {args.target} (or: sweep status DIR)")
    if args.out is None:
        raise ValueError("sweep CONFIG needs --out DIR, the folder of its record")
    engine = make_engine(args.engine, address=args.address, batch_size=args.batch_size, retries=args.retries,
                         num_cpus=args.num_cpus)
    sweep = load_sweep(args.target[0])
    if args.cpus_per_cell is not None:
        sweep = dataclasses.replace(sweep, cpus_per_cell=args.cpus_per_cell)
    print(f"{sweep.name}: {len(sweep.cells)} cells (of {sweep.n_points} declared points: grid x draws x seeds), "
          f"{sweep.cpus_per_cell} CPU(s) per cell, {engine.name} engine -> {Path(args.out).resolve()}", flush=True)
    try:
        result = run_sweep(sweep, args.out, engine, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"interrupted: every finished cell is kept in {args.out}; rerun the same command to continue",
              file=sys.stderr)
        return 130
    print(result.summary())
    if result.failed:
        print("failed cells (their errors are in failures/; rerun the same command to retry them):")
        for f in result.failed:
            print(f"  {f['id']}  {f['label']}: {f['error']}")
        return 1
    return 0


def _cmd_experiment(args: argparse.Namespace) -> int:
    from .sweep import load_record, load_sweep

    name = load_sweep(args.config).name
    if name != args.trainer:
        raise ValueError(f"{args.config} is a sweep of the {name!r} runnable; experiment {args.trainer} runs a config whose "
                         f'"runnable" is "{args.trainer}" (run other sweeps with: sweep CONFIG --out DIR)')
    args.target = [args.config]
    status = _cmd_sweep(args)
    if status in (0, 1) and len(table := load_record(args.out)):  # every run finished, or some failed
        from .report.trainer import final_table, format_final_table

        print()
        print(format_final_table(final_table(table)))
    return status


def _add_engine_options(parser: argparse.ArgumentParser, unit: str) -> None:
    """The options of a command that runs a sweep's cells (each a ``unit``) on the local or the Ray engine."""
    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help=f"local: in this process (default); ray: one Ray task per {unit}")
    parser.add_argument("--address", help="Ray cluster: auto, ray://HOST:PORT or HOST:PORT (default: start a local instance)")
    parser.add_argument("--num-cpus", type=_positive, help="CPUs of the local Ray instance (default: this machine's)")
    parser.add_argument("--cpus-per-cell", type=_positive,
                        help=f"CPUs (torch threads) per {unit} (default: the config's, else 1)")
    parser.add_argument("--retries", type=_non_negative, default=3, help=f"ray engine: reruns of a {unit} whose worker died")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m robustgrpo``."""
    parser = _OneLineParser(prog=PROG, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="seed 000's poisoned group through every estimator").set_defaults(func=_cmd_demo)
    sub.add_parser("estimators", help="list the estimator catalogue").set_defaults(func=_cmd_estimators)
    bench = sub.add_parser("bench", help="time the estimators (prints a table)")
    bench.add_argument("--shapes", type=_shape, nargs="+", metavar="BxG", help="shapes to time (default 65536x16 4096x256)")
    bench.add_argument("--repeats", type=_positive, default=7, help="timed calls per case (median reported)")
    bench.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    bench.add_argument("--dashboard", action="store_true",
                       help="time the dashboard's slider moves at G=256 with 10^4 groups and notebook 03's heat-map sweep")
    bench.add_argument("--threads", type=_positive,
                       help="torch threads for --dashboard and --lessons (default: torch's own count; on cores that "
                            "other work shares, 1 avoids the collapse of torch's thread pool)")
    bench.add_argument("--lessons", action="store_true",
                       help="time every control of the live lessons of notebooks 01, 02 and 04 at their largest sizes")
    bench.add_argument("--simulate", action="store_true",
                       help="time the drift simulator (256 prompts x G=16 x 500 steps x 8 seeds) and the notebook 05 dashboard's rerun")
    bench.add_argument("--sweep", action="store_true",
                       help="time the sweep engines: per-cell overhead and cells per second, local and Ray")
    bench.add_argument("--trainer", action="store_true",
                       help="time real TRL trainer steps per estimator and the estimator's share of a step (needs trl)")
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
    notebooks.set_defaults(func=_cmd_notebooks)
    diag = sub.add_parser("diagnose", help="diagnose a reward log (CSV, JSON Lines, Parquet) or a TRL / verl run folder "
                                           "and recommend an estimator")
    diag.add_argument("file", help="reward log (one row per sample with step, group (prompt id), reward), or a run folder: "
                                   "TRL's output_dir (log_completions=True) or verl's trainer.rollout_data_dir")
    diag.add_argument("--reward-range", type=float, nargs=2, metavar=("LO", "HI"), help="flag rewards outside [LO, HI]")
    diag.add_argument("--reward-fn", metavar="NAME", help="the reward function to diagnose when the log holds several")
    diag.add_argument("--column", type=_column, action="append", metavar="FIELD=NAME",
                      help="the file's column for a field (step, group, reward, reward_fn, length), e.g. group=question_id")
    diag.add_argument("--skip-bad", action="store_true", help="skip malformed rows and say how many and why, instead of stopping")
    diag.add_argument("--group-size", type=_integer_at_least(1), metavar="N",
                      help="a run's group size: TRL's num_generations, verl's actor_rollout_ref.rollout.n (default: inferred)")
    diag.add_argument("--reward-weights", type=float, nargs="+", metavar="W",
                      help="a TRL run's reward_weights, one per reward function (default: 1 each)")
    diag.add_argument("--html", metavar="OUT", help="also write a self-contained HTML report with figures")
    diag.set_defaults(func=_cmd_diagnose)
    simulate = sub.add_parser("simulate", help="run the drift simulator from a JSON config")
    simulate.add_argument("config", help="JSON config file (robustgrpo.simulate.SimConfig.to_file writes one)")
    simulate.add_argument("--out", required=True, help="folder for record.parquet, config.json and the figure")
    simulate.add_argument("--seeds", type=_seed_spec, nargs="+", default=[10], metavar="N",
                          help="one number: that many seeds (0 .. N-1); several: those seeds (default 10)")
    simulate.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    simulate.set_defaults(func=_cmd_simulate)
    sweep = sub.add_parser("sweep", help="run a sweep config into a Parquet record (or: sweep status DIR)",
                           usage="python -m robustgrpo sweep CONFIG --out DIR [--engine {local,ray}] [--address ADDRESS] ...\n"
                                 "       python -m robustgrpo sweep status DIR")
    sweep.add_argument("target", nargs="+", metavar="CONFIG | status DIR",
                       help="a sweep's JSON config (README: Sweeps), or 'status' and a record folder")
    sweep.add_argument("--out", metavar="DIR", help="the record folder; a rerun into it skips finished cells")
    _add_engine_options(sweep, "cell")
    sweep.add_argument("--batch-size", type=_positive, default=16, help="local engine: most seeds per vectorized call")
    sweep.set_defaults(func=_cmd_sweep)
    experiment = sub.add_parser("experiment", help="real trainer runs as a sweep: experiment trl CONFIG --out DIR",
                                usage=f"{PROG} experiment trl CONFIG --out DIR [--engine {{local,ray}}] [--address ADDRESS] ...")
    experiment.add_argument("trainer", choices=["trl"], help="the trainer: trl (TRL's GRPOTrainer through robustgrpo.integrations.trl)")
    experiment.add_argument("config", help='a sweep config whose "runnable" is "trl" (e.g. data/sweeps/trl_contamination.json)')
    experiment.add_argument("--out", required=True, metavar="DIR", help="the record folder; a rerun into it skips finished runs")
    _add_engine_options(experiment, "run")
    experiment.set_defaults(func=_cmd_experiment, batch_size=1)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m robustgrpo``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as err:  # user errors: one line, no traceback
        print(f"{PROG} {args.command}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
