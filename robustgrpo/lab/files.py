"""What the lab, the book and the command line read and write: files, folders, JSON, tables, text from files.

The rules (each refuses with a ``ValueError`` that names the file and what to do):

* output folders are made (with their parents) before any work starts, or refused with the
  reason (:func:`make_folder`); an output file is written only where it replaces no input,
  follows no symbolic link and overwrites nothing unless asked (:func:`check_output_file`,
  :func:`write_new_file`);
* JSON files are read as UTF-8, their errors naming the file, line and column
  (:func:`read_json`, :func:`decode_utf8`), nesting at most :data:`JSON_MAX_DEPTH` deep, no
  object repeating a key, an integer too long to convert kept as its text (:func:`loads_json`);
* text from a file (group ids, names, messages) is shown with every control character escaped
  (:func:`plain_text`, :func:`terminal_text`), so a log cannot drive the terminal (clear it,
  set its title) through what is printed;
* a table handed to a figure or a metric is a non-empty DataFrame with the columns it needs
  (:func:`require_columns`).

The standard library and :func:`robustgrpo.lab.params.setting` only (pandas is imported
where a table is checked), so the command line reads it without the lab's packages.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from robustgrpo.lab.params import setting

if TYPE_CHECKING:  # the lab's, imported where a table is checked
    import pandas as pd

__all__ = [
    "require_columns",
    "make_folder",
    "read_json",
    "decode_utf8",
    "JSON_MAX_DEPTH",
    "JSON_MAX_INT_DIGITS",
    "LongInteger",
    "json_depth_error",
    "loads_json",
    "plain_text",
    "terminal_text",
    "check_output_file",
    "write_new_file",
]


def require_columns(frame: object, columns: Iterable[str], name: str, *, produced_by: str | None = None) -> "pd.DataFrame":
    """Check that ``frame`` is a non-empty DataFrame holding ``columns``; return it.

    Raises ``ValueError`` naming the argument (``name``), what is wrong and,
    with ``produced_by``, the function whose table to pass.
    """
    import pandas as pd  # (the lab's: the core imports no pandas)

    hint = f"; pass the table from {produced_by}" if produced_by else ""
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}{hint}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing} (it has {list(frame.columns)}){hint}")
    if frame.empty:
        raise ValueError(f"{name} is empty: nothing to compute or draw; pass at least one row")
    return frame


def make_folder(path: str | os.PathLike[str]) -> Path:
    """Make the folder ``path`` (and its parents) if missing and return it.

    Raises ``ValueError`` naming the folder and why it cannot be made (a file
    of that name, a file among its parents, no permission), so a command can
    refuse a bad output folder in one line before it starts its work.
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot make the folder {str(folder)!r} ({err.strerror}); pass a folder you can write to") from None
    return folder


def decode_utf8(data: bytes, name: str) -> str:
    """``data`` decoded as UTF-8 (a byte-order mark dropped).

    Raises ``ValueError`` naming ``name`` and where the first byte that is not
    UTF-8 sits: its line, column and offset, so the user can find it.

    >>> decode_utf8(b"step,reward\\n0,\\xff\\n", "log.csv")
    Traceback (most recent call last):
    ...
    ValueError: log.csv: not UTF-8 text: byte 0xff at line 2, column 3 (byte offset 14); save the file as UTF-8
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(f"{name}: not UTF-8 text: byte 0x{data[err.start]:02x} at line {line}, column {column} "
                         f"(byte offset {err.start}); save the file as UTF-8") from None


#: JSON files (configs, manifests, JSON Lines records) nest at most this deep.
JSON_MAX_DEPTH = 64


def _depth(value: Any) -> int:
    """How deep ``value`` nests lists and dicts (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        if deepest > JSON_MAX_DEPTH:
            break
        stack.extend((child, level + 1) for child in children)
    return deepest


def json_depth_error(name: str) -> ValueError:
    """The error for a JSON value that nests deeper than :data:`JSON_MAX_DEPTH`."""
    return ValueError(f"{name}: JSON nested more than {JSON_MAX_DEPTH} levels deep; no config or record of this "
                      "package nests that deep: check the file")


#: A JSON integer written with more digits than this is beyond every float64 (10**309) and int64: it is read as a
#: :class:`LongInteger` (Python's own reader refuses more than 4,300 digits, and converts long ones in quadratic time).
JSON_MAX_INT_DIGITS = 400


class LongInteger(int):
    """A JSON integer of more than :data:`JSON_MAX_INT_DIGITS` digits: an ``int`` of its sign and number of digits
    (``±10**(digits - 1)``, so every comparison with a float64 or int64 bound comes out as the written value's
    would), shown as the text it was written as."""

    text: str

    def __new__(cls, text: str) -> "LongInteger":
        digits = len(text.lstrip("+-"))
        value = super().__new__(cls, -(10 ** (digits - 1)) if text.startswith("-") else 10 ** (digits - 1))
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def _integer(text: str) -> int:
    return int(text) if len(text) <= JSON_MAX_INT_DIGITS else LongInteger(text)


class _DuplicateKey(ValueError):
    """A JSON object that repeats a key (Python's reader would keep the last value silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _DuplicateKey(repeated)
    return out


def loads_json(text: str, name: str, hint: str = "") -> Any:
    """Parse JSON text; ``ValueError`` naming ``name`` and the place for a syntax error, too deep a nesting or an
    object that repeats a key. An integer of more than :data:`JSON_MAX_INT_DIGITS` digits is a :class:`LongInteger`.

    >>> loads_json('{"a": 1, "a": 2}', "x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: a JSON object repeats the key 'a'; keep one
    """
    try:
        value = json.loads(text, parse_int=_integer, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ValueError(f"{name}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}{hint}") from None
    except _DuplicateKey as err:
        raise ValueError(f"{name}: a JSON object repeats the key {str(err)!r}; keep one{hint}") from None
    except RecursionError:
        raise json_depth_error(name) from None
    if _depth(value) > JSON_MAX_DEPTH:
        raise json_depth_error(name)
    return value


def read_json(path: Path, hint: str = "") -> Any:
    """The JSON content of the file ``path`` (which the caller has checked exists).

    Raises ``ValueError`` naming the file and where its syntax breaks
    (``PATH: invalid JSON at line L, column C: what``), then ``hint``; also for
    a file that is not UTF-8 (:func:`decode_utf8`) or nests deeper than
    :data:`JSON_MAX_DEPTH`.
    """
    return loads_json(decode_utf8(path.read_bytes(), str(path)), str(path), hint)


# ------------------------------------------------------------------ text from files

# C0 controls but tab and newline, DEL, C1 controls (CSI, OSC... as single bytes), and the
# bidirectional overrides and isolates that reorder what a terminal or page shows.
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_TERMINAL_UNSAFE = re.compile(f"[{_CONTROL}]")
_FIELD_UNSAFE = re.compile(f"[{_CONTROL}\t\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain_text(text: Any) -> str:
    r"""``str(text)`` with every control character escaped (tab and newline too): one inert line.

    For one field from a file (a group id, a name) shown in a table, a message or a page.

    >>> plain_text("a\x1b]0;owned\x07b\n")
    'a\\x1b]0;owned\\x07b\\x0a'
    """
    return _FIELD_UNSAFE.sub(_escape, str(text))


def terminal_text(text: str) -> str:
    r"""``text`` with every control character but tab and newline escaped: safe to print.

    An escape sequence (ESC ``[2J`` clears the screen, ESC ``]0;...`` BEL sets the
    title), a C1 control or a bidirectional override becomes visible text.

    >>> terminal_text("line 1\n\x1b[2Jline 2")
    'line 1\n\\x1b[2Jline 2'
    """
    return _TERMINAL_UNSAFE.sub(_escape, text)


# ------------------------------------------------------------------ output files


def check_output_file(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (),
                      force: bool = False) -> Path:
    """Check that a file may be written at ``path``; return it.

    Refused, with ``ValueError`` naming the path and what to do: an empty path; a
    folder; a symbolic link (it would write where the link points); one of ``inputs``
    (the same file, by any name); a missing folder (it is not made: a misspelt folder
    should not appear silently); a folder where no file can be made (a file is made
    and removed there to find out, so that a read-only or special folder is refused
    before any work starts); an existing file, unless ``force``.
    """
    if not str(path).strip():
        raise ValueError("the output path is empty; pass the file to write")
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{str(path)!r} is a symbolic link; outputs never follow one: remove it or pass another path")
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder; pass the file to write inside it")
    for source in inputs:
        source = Path(source)
        same = path.exists() and source.exists() and os.path.samefile(path, source)
        if same or path.resolve() == source.resolve():
            raise ValueError(f"{str(path)!r} is an input of this command ({str(source)!r}); writing it would replace "
                             "the input: pass another path")
    if not path.parent.is_dir():
        raise ValueError(f"the folder {str(path.parent)!r} does not exist; make it first or pass a path in an existing folder")
    if path.exists() and not force:
        raise ValueError(f"{str(path)!r} exists; pass another path, or {setting('force', True)} to replace it")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise ValueError(f"cannot write in the folder {str(path.parent)!r} ({err.strerror}); pass a path in a folder you "
                         "can write to") from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_new_file(path: Path, write: Callable[[IO[bytes]], None], *, force: bool = False) -> Path:
    """Write a file atomically through a temporary file in its folder.

    Without ``force`` the file must not exist when the write ends (a hard link
    puts it in place, which fails on any existing name, a symbolic link
    included); with ``force`` it is replaced (``os.replace`` replaces a link
    itself, never its target). Call :func:`check_output_file` first for the
    messages.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise ValueError(f"cannot write {str(path)!r} ({err.strerror}); pass a path in a folder you can write to") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise ValueError(f"{str(path)!r} exists; pass another path, or {setting('force', True)} to replace it") from None
            except OSError:  # a file system without hard links: check, then rename
                if os.path.lexists(path):
                    raise ValueError(f"{str(path)!r} exists; pass another path, or {setting('force', True)} to replace it") from None
                os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
