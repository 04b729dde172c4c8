"""Shared CLI helpers: consoles, error exits, JSON output and tables.

The CLI starts fast because nothing heavy loads before a command needs it: Rich when something
is printed, the SDK (httpx) when a request is made, pydantic models only where a command
validates input or shows more than a table (``bench/cli.py`` times it).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, cast

import typer

from troupe.api.errors import TroupeError

if TYPE_CHECKING:
    from rich.console import Console

    from troupe.client.sdk import Client

P = ParamSpec("P")
R = TypeVar("R")


class _LazyConsole:
    """A Rich console made on first use (importing Rich costs more than most commands)."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
        return getattr(self._console, name)


#: Results (tables, fields) go to stdout.
console = cast("Console", _LazyConsole())
#: Errors and progress go to stderr, so that stdout stays clean for scripts.
err_console = cast("Console", _LazyConsole(stderr=True))


def fail(message: str, code: int = 1) -> NoReturn:
    """Prints ``error: MESSAGE`` in red on stderr and exits with ``code``."""
    from rich.text import Text

    err_console.print(Text("error: ", style="bold red") + Text(message, style="red"))
    raise typer.Exit(code)


@contextmanager
def api_errors() -> Iterator[None]:
    """Turns API and connection errors into :func:`fail` (one line, no traceback)."""
    try:
        yield
    except TroupeError as e:
        fail(e.message)
    except Exception as e:
        import httpx  # loaded by now: only the SDK raises these

        if isinstance(e, httpx.HTTPError):  # anything the SDK did not wrap
            fail(f"request failed: {e}")
        raise


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`api_errors` for a command function."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with api_errors():
            return func(*args, **kwargs)

    return wrapper


@contextmanager
def client() -> Iterator[Client]:
    """A :class:`Client` from the usual settings, closed at the end; API errors -> fail."""
    if "httpx" not in sys.modules:
        # httpx imports its own command line (click, Rich's progress, Pygments: about 0.1 s)
        # when those are installed; this process never runs it, so it gets httpx's stand-in.
        sys.modules["httpx._main"] = None  # type: ignore[assignment]
        try:
            import httpx  # noqa: F401
        finally:
            del sys.modules["httpx._main"]
    from troupe.client.sdk import Client  # httpx loads on first use, models where needed

    with api_errors():
        c = Client()
        try:
            yield c
        finally:
            c.close()


def to_jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):  # a pydantic model
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(x) for x in obj]
    return obj


def print_json(obj: Any) -> None:
    """Writes ``obj`` (pydantic models, lists, dicts) as indented JSON on stdout."""
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2) + "\n")
    sys.stdout.flush()


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A plain table on stdout: a bold header row, then one row per item."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for col in columns:
        table.add_column(col, no_wrap=True, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell_text(v)) for v in row))
    if console.is_terminal:
        console.print(table)  # fit the screen
    else:  # piped: never cut cells, whatever COLUMNS says
        needed = Measurement.get(console, console.options.update(max_width=100_000), table)
        Console(highlight=False, width=max(needed.maximum, console.width)).print(table)


def print_fields(pairs: Iterable[tuple[str, object]]) -> None:
    """``key: value`` lines, values aligned."""
    from rich.text import Text

    items = [(k, cell_text(v)) for k, v in pairs]
    width = max((len(k) for k, _ in items), default=0) + 1
    for key, value in items:
        console.print(Text(f"{key + ':':<{width}} ", style="bold") + Text(value))


def cell_text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return fmt_time(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def fmt_time(dt: datetime | None) -> str:
    """Local time, seconds precision; naive times from the server are UTC."""
    if dt is None:
        return "-"
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def format_size(n: int) -> str:
    """Bytes as ``256m``, ``2g`` when a whole number of a unit (else the bytes): the same as
    :func:`troupe.api.models.format_size`, here so that tables need no pydantic (a unit test
    holds the two together)."""
    for unit, factor in (("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def human_size(n: int) -> str:
    """``format_size`` when exact (``256m``), else one decimal (``187.3m``)."""
    exact = format_size(n)
    if not exact.isdigit() or n < 1024:
        return exact
    for unit, factor in (("t", 1024**4), ("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n >= factor:
            return f"{n / factor:.1f}{unit}"
    return exact  # pragma: no cover


def fmt_timestamp(value: str) -> str:
    """An image's ``created``: Unix seconds or ISO 8601 text, as local time."""
    if value.isdigit():
        return fmt_time(datetime.fromtimestamp(int(value), UTC))
    try:
        return fmt_time(datetime.fromisoformat(value.replace("Z", "+00:00")[:32]))
    except ValueError:
        return value


def short_id(value: str | None, n: int = 12) -> str:
    """The first ``n`` characters of an id, without a ``sha256:`` prefix."""
    if not value:
        return "-"
    return value.removeprefix("sha256:")[:n]
