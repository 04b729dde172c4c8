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
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar, cast

import typer

from troupe.api.errors import TroupeError
from troupe.client.cli.table import cell_text

#: The ``--json`` flag of every list and show command.
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]

if TYPE_CHECKING:
    from rich.console import Console

    from troupe.client.sdk import Client

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


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


def one_line(text: str) -> str:
    """``text`` on one line (an error is one line, whatever a server or library said)."""
    return " ".join(text.split())


def unexpected(e: Exception) -> str:
    """What went wrong, in one line, for an error no command expected."""
    httpx = sys.modules.get("httpx")  # loaded if the SDK ran: only it raises these
    if httpx is not None and isinstance(e, httpx.HTTPError):  # anything the SDK did not wrap
        return f"request failed: {e}"
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return f"unexpected error ({type(e).__name__}): {e}"


@contextmanager
def api_errors() -> Iterator[None]:
    """Turns every failure into :func:`fail`: one line, no traceback, a non-zero exit (a
    command's own exit code, Typer's usage errors and interrupts pass as they are)."""
    try:
        yield
    except TroupeError as e:
        fail(one_line(e.message), int(getattr(e, "exit_code", 1) or 1))
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except Exception as e:
        fail(one_line(unexpected(e)))


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`api_errors` for a command function."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with api_errors():
            return func(*args, **kwargs)

    return wrapper


class App(typer.Typer):
    """A group of commands, each run under :func:`api_errors`: however it fails, the user
    reads one line (every group of the client's command line is one)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        register = super().command(*args, **kwargs)

        def decorator(func: F) -> F:
            register(handle_errors(func))
            return func

        return decorator


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
