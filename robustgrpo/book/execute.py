"""Execute the notebook series headless, as the tests and the main job do.

Each notebook runs top to bottom in a fresh kernel with its own folder as the
working directory and ``$ROBUSTGRPO_FIGURES`` pointing at the figure folder,
so the figures it saves land where the caller chose. Unless the caller set
``OMP_NUM_THREADS``, kernels run torch on one thread: the notebooks' tensors
are small, and on a machine with few shared cores torch's thread pool slowed
them several-fold. The executed copy's prose gets the values its code cells
glued (:func:`robustgrpo.book.glue.fill`): a placeholder without a value, or a
value no placeholder uses, fails the run with the notebook's and the value's name.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from robustgrpo.checks import check_int
from robustgrpo.lab.files import decode_utf8, make_folder

__all__ = ["NOTEBOOK_DIR", "CALL_TAG", "NotebookRun", "list_notebooks", "resolve_notebook", "read_notebook", "run_notebook",
           "reading_html", "run_all"]

#: The committed notebooks (without outputs).
NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
#: The tag of a code cell that shows a reader the call a trainer would write (``compute_advantages(...)``,
#: ``RobustGRPOTrainer(...)``): the page to read without the code keeps that cell's source.
CALL_TAG = "call"


@dataclass(frozen=True)
class NotebookRun:
    """One executed notebook: where it came from, where the executed copy went, how long it took, the values
    its code cells glued into its prose, and (``update_prose``) the committed values that changed."""

    source: Path
    executed: Path | None
    seconds: float
    values: dict = field(default_factory=dict)
    updated: list = field(default_factory=list)


def list_notebooks(directory: str | Path = NOTEBOOK_DIR) -> list[Path]:
    """The ``*.ipynb`` files of ``directory`` in name order."""
    paths = sorted(Path(directory).glob("*.ipynb"))
    if not paths:
        raise ValueError(f"no notebooks found in {directory}; pass the folder that holds the .ipynb files")
    return paths


def resolve_notebook(name: str | Path) -> Path:
    """The notebook ``name`` names: a path to an ``.ipynb`` file, or a name in the series.

    ``notebooks/01_outlier_poisoning.ipynb``, ``01_outlier_poisoning.ipynb`` and
    ``01_outlier_poisoning`` all name the same notebook. A name that matches
    nothing is a ``ValueError`` that lists the series.
    """
    path = Path(name)
    candidates = [path, NOTEBOOK_DIR / path.name, NOTEBOOK_DIR / f"{path.name}.ipynb"]
    found = next((c for c in candidates if c.suffix == ".ipynb" and c.is_file()), None)
    if found is None:
        known = ", ".join(p.stem for p in list_notebooks())
        raise ValueError(f"no notebook {str(name)!r}; pass an .ipynb file or one of the series: {known}")
    return found


def read_notebook(path: str | Path):
    """The notebook at ``path`` (nbformat 4); ``ValueError`` naming the file for one that is not a notebook
    (not UTF-8, not JSON, or not valid against the notebook schema)."""
    import nbformat

    path = Path(path)
    try:
        text = decode_utf8(path.read_bytes(), str(path))
        return nbformat.reads(text, as_version=4)
    except ValueError as err:
        if str(err).startswith(str(path)):
            raise
        raise ValueError(f"{path}: not a Jupyter notebook ({' '.join(str(err).split())[:200]}); pass an .ipynb file") from None
    except Exception as err:  # noqa: BLE001 - nbformat raises jsonschema's ValidationError and others
        raise ValueError(f"{path}: not a valid Jupyter notebook ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:200]}); pass an .ipynb file") from None


def run_notebook(
    path: str | Path, *, figures: str | Path, out: str | Path | None = None, timeout: int = 600,
    update_prose: bool = False,
) -> NotebookRun:
    """Execute one notebook and fill its prose with the values its code cells glued; save the executed copy in
    ``out`` if given, and beside it the same notebook as a page to read without the code (:func:`reading_html`,
    ``<name>.html``). With ``update_prose`` the computed values are also written into the prose of the notebook
    file itself (:func:`robustgrpo.book.glue.update_prose`).

    Raises ``nbclient.exceptions.CellExecutionError`` (with the failing
    cell's traceback) if any cell raises, and ``ValueError`` naming the
    notebook and the value if its prose and its glued values do not match
    (:func:`robustgrpo.book.glue.fill`).
    """
    import nbformat
    from nbclient import NotebookClient

    from robustgrpo.book import glue
    from robustgrpo.book.figures import FIGURES_ENV

    path = Path(path)
    nb = read_notebook(path)
    kernel_env = {FIGURES_ENV: str(Path(figures).resolve()), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    previous = {key: os.environ.get(key) for key in kernel_env}
    os.environ.update(kernel_env)  # the kernel inherits the environment when it starts
    try:
        start = time.perf_counter()
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no start-up chatter on the user's terminal
        ).execute()
        seconds = time.perf_counter() - start
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    values = glue.fill(nb, path.name)
    updated = glue.update_prose(path, nb) if update_prose else []
    executed = None
    if out is not None:
        executed = Path(out) / path.name
        executed.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, executed)
        executed.with_suffix(".html").write_text(reading_html(nb), encoding="utf-8")
    return NotebookRun(path, executed, seconds, values, updated)


def reading_html(nb) -> str:
    """An executed notebook as one HTML page to read without its code: the prose, the printed text and the
    figures, and no code cell's source but those tagged :data:`CALL_TAG` (the call a trainer would write);
    no prompt. The dashboards need a kernel: they show in Lab or on their Voilà pages, not here."""
    import copy

    from nbconvert import HTMLExporter

    page = copy.deepcopy(nb)
    for cell in page.cells:
        if cell.cell_type == "code" and CALL_TAG not in cell.get("metadata", {}).get("tags", []):
            cell.metadata.setdefault("transient", {})["remove_source"] = True
    exporter = HTMLExporter(exclude_input_prompt=True, exclude_output_prompt=True)
    body, _resources = exporter.from_notebook_node(page)
    return body


def run_all(
    out: str | Path, *, notebooks: Sequence[str | Path] | None = None, timeout: int = 600, progress: bool = True,
    update_prose: bool = False,
) -> list[NotebookRun]:
    """Execute every notebook into ``out/notebooks``, their figures into ``out/figures``.

    ``notebooks`` names a subset (see `resolve_notebook`); every name, the
    ``timeout`` (seconds per cell, >= 1) and the output folders are checked
    before the first kernel starts. ``update_prose`` writes the computed
    values into the prose of the notebook files (:func:`run_notebook`).
    """
    from tqdm.auto import tqdm

    out = Path(out)
    check_int("timeout", timeout, minimum=1, hint="seconds allowed per cell")
    paths = [resolve_notebook(p) for p in notebooks] if notebooks else list_notebooks()
    for path in paths:  # every one a notebook, before the first kernel starts
        read_notebook(path)
    for folder in (out / "figures", out / "notebooks"):
        make_folder(folder)
    return [
        run_notebook(p, figures=out / "figures", out=out / "notebooks", timeout=timeout, update_prose=update_prose)
        for p in tqdm(paths, desc="notebooks", disable=not progress)
    ]
