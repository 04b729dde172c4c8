"""Shared CLI helpers: consoles, error exits, JSON output and ``key: value`` fields (tables:
:mod:`troupe.client.cli.table`).

The CLI starts fast because nothing heavy loads before a command needs it: Rich when something
is printed, the SDK (httpx) when a request is made, pydantic models only where a command
validates input or shows more than a table (``bench/cli.py`` times it).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, cast

import typer

from troupe.api.errors import TroupeError
from troupe.client.cli.table import cell_text

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


def print_error(message: str) -> None:
    """``error: MESSAGE`` in red on stderr: every CLI error reads this way."""
    from rich.text import Text

    err_console.print(Text("error: ", style="bold red") + Text(message, style="red"))


def fail(message: str, code: int = 1) -> NoReturn:
    """:func:`print_error`, then exit with ``code``."""
    print_error(message)
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


def print_fields(pairs: Iterable[tuple[str, object]]) -> None:
    """``key: value`` lines, values aligned."""
    from rich.text import Text

    items = [(k, cell_text(v)) for k, v in pairs]
    width = max((len(k) for k, _ in items), default=0) + 1
    for key, value in items:
        console.print(Text(f"{key + ':':<{width}} ", style="bold") + Text(value))
