"""``troupe session logs | exec | run | shell``: use a session's kernels. The commands join the
``session`` group (see :mod:`troupe.client.cli.sessions`)."""

from __future__ import annotations

import sys
import threading
from typing import Annotated

import typer

from troupe.client.cli.choices import ExecUser
from troupe.client.cli.fastpath import NO_EXIT_CODE, quiet_stdout
from troupe.client.cli.output import App, client, err_console, fail

app = App()

NameArg = Annotated[str, typer.Argument(help="session name or id", show_default=False)]
CommandArg = Annotated[list[str], typer.Argument(help="the command, after --", show_default=False)]
KernelOpt = Annotated[str, typer.Option("--kernel", "-k", help="main1, sub1, ...")]
UserOpt = Annotated[ExecUser, typer.Option("--user", "-u", help="run as work or root")]
#: Everything after the session name is the command, options included.
COMMAND_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command()
def logs(
    name: NameArg,
    container: Annotated[
        str | None,
        typer.Option(
            "--container",
            "-c",
            help="one kernel's log, e.g. sub1 (default: all, prefixed)",
            show_default=False,
        ),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
) -> None:
    """Print a session's logs (also after it ended)."""
    try:
        with client() as c:
            for line in c.logs(name, container=container, follow=follow):
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:
        quiet_stdout()
        raise typer.Exit(141) from None  # as if killed by SIGPIPE


@app.command("exec", context_settings=COMMAND_ARGS)
def exec_(
    name: NameArg, command: CommandArg, kernel: KernelOpt = "main1", user: UserOpt = "work"
) -> None:
    """Run a command in a kernel; its output streams, its exit code is passed through."""
    out = sys.stdout.buffer
    code: int | None = None
    try:
        with client() as c:
            for item in c.exec_stream(name, command, kernel=kernel, user=user):
                if isinstance(item, int):
                    code = item
                else:
                    out.write(item)
                    out.flush()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:
        quiet_stdout()
        raise typer.Exit(141) from None  # as if killed by SIGPIPE
    if code is None:
        fail(NO_EXIT_CODE)
    raise typer.Exit(code)


@app.command("run", context_settings=COMMAND_ARGS)
def run(name: NameArg, command: CommandArg, user: UserOpt = "work") -> None:
    r"""Run a command on every kernel at once; lines are prefixed \[host], the worst exit
    code is passed through."""

    with client() as c:
        hosts = [k.hostname for k in c.get_session(name).kernels]
    out = sys.stdout.buffer
    lock = threading.Lock()
    codes: dict[str, int] = {}
    errors: dict[str, str] = {}

    def one(host: str) -> None:
        prefix = f"[{host}] ".encode()
        pending = b""
        try:
            with client() as c:
                for item in c.exec_stream(name, command, kernel=host, user=user):
                    if isinstance(item, int):
                        codes[host] = item
                        continue
                    *lines, pending = (pending + item).split(b"\n")
                    if lines:
                        with lock:
                            out.write(b"".join(prefix + line + b"\n" for line in lines))
                            out.flush()
        except (Exception, SystemExit) as e:  # one kernel's failure must not hide the others
            errors[host] = str(e) or type(e).__name__
        if pending:
            with lock:
                out.write(prefix + pending + b"\n")
                out.flush()

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if errors:
        from rich.text import Text
    for host, message in errors.items():
        err_console.print(Text(f"{host}: {message}", style="red"))
    worst = max([codes.get(h, 255 if h in errors else 0) for h in hosts], default=0)
    raise typer.Exit(worst if worst >= 0 else 255)


@app.command()
def shell(name: NameArg, kernel: KernelOpt = "main1") -> None:
    """Open an interactive terminal in a kernel (stdin may also be piped)."""
    from troupe.client.cli.terminal import open_terminal, shell_url
    from troupe.client.settings import load_settings

    url, key = load_settings()
    result = open_terminal(shell_url(url, name, kernel), key)
    if isinstance(result, str):
        fail(result)
    raise typer.Exit(result)
