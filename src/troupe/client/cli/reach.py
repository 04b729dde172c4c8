"""``troupe session tunnel | ssh | ssh-config | forward | cp``: reach into a session like a
machine, through the manager (no port is published anywhere). The commands join the
``session`` group (see :mod:`troupe.client.cli.sessions`); what they build on is in
:mod:`troupe.client.pipe`. See docs/reach.md.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from troupe.api.exec import KERNEL_NAME
from troupe.client.cli.output import App, client, console, err_console, fail
from troupe.client.cli.session_exec import COMMAND_ARGS, KernelOpt, NameArg
from troupe.client.paths import REF_PATTERN

if TYPE_CHECKING:
    from troupe.api.models import SessionSSH

app = App()

#: What ``--ssh-key`` of ``troupe session create`` takes when it is not given: the first found.
DEFAULT_KEYS = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")
HOME = "/home/work"
#: ``NAME[/KERNEL]:PATH``; KERNEL is any kernel's hostname (main1, sub1, worker2, ...), as the
#: manager's routes take it.
_REMOTE = re.compile(rf"({REF_PATTERN})(?:/({KERNEL_NAME}))?:(.*)", re.DOTALL)


# -- pure helpers (unit-tested) ------------------------------------------------------------
@dataclass(frozen=True)
class Remote:
    """``NAME[/KERNEL]:PATH`` of ``troupe session cp``, PATH made absolute under /home/work."""

    session: str
    kernel: str
    path: str

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


def parse_remote(spec: str) -> Remote | None:
    """The remote side named by ``spec``, or None for a local path (one that starts with
    ``/`` or ``.``, or has no ``NAME:`` prefix; write ``./a:b`` for a local file with a colon)."""
    if spec.startswith(("/", ".")):
        return None
    m = _REMOTE.fullmatch(spec)
    if m is None:
        return None
    session, kernel, path = m.group(1), m.group(2) or "main1", m.group(3)
    path = posixpath.normpath(posixpath.join(HOME, path)) if path else HOME
    if path.startswith("//"):  # normpath keeps a leading "//"
        path = "/" + path.lstrip("/")
    return Remote(session, kernel, path)


def host_options(
    alias: str,
    proxy_command: str,
    known_hosts: Path,
    host_key_alias: str,
    identity: Path | None,
) -> list[tuple[str, str]]:
    """The OpenSSH options of a session's Host block (and of ``troupe session ssh``'s -o)."""
    options = [
        ("User", "work"),
        ("ProxyCommand", proxy_command),
        ("HostKeyAlias", host_key_alias),
        ("UserKnownHostsFile", str(known_hosts)),
        ("StrictHostKeyChecking", "yes"),
    ]
    if identity is not None:
        options += [("IdentityFile", str(identity)), ("IdentitiesOnly", "yes")]
    options += [("ServerAliveInterval", "30")]
    return options


def _config_value(value: str) -> str:
    """A value as ssh_config reads it: in double quotes when it has blanks."""
    if any(c in value for c in '\r\n\0"'):
        raise ValueError(f"cannot be written into an ssh config: {value!r}")
    return f'"{value}"' if any(c.isspace() for c in value) else value


def host_block(alias: str, options: list[tuple[str, str]]) -> str:
    """``Host ALIAS`` and its options, as ``~/.ssh/config`` takes them."""
    lines = [f"Host {alias}"]
    for key, value in options:
        # ProxyCommand is the rest of the line, given to the shell as it is.
        lines.append(f"    {key} {value if key == 'ProxyCommand' else _config_value(value)}")
    return "\n".join(lines) + "\n"


def known_hosts_update(text: str, host_key_alias: str, host_key: str) -> str:
    """``text`` (a known_hosts file) with the one line of ``host_key_alias`` set to
    ``host_key`` (``TYPE BASE64``); other sessions' lines stay."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and line.split(None, 1)[0] != host_key_alias
    ]
    return "\n".join([*kept, f"{host_key_alias} {host_key}"]) + "\n"


def key_blob(line: str) -> str:
    """``TYPE BASE64`` of a public key line (its comment dropped)."""
    return " ".join(line.split()[:2])


# -- helpers with I/O ------------------------------------------------------------------
def default_public_key() -> Path | None:
    """The first of ~/.ssh/id_ed25519.pub, id_ecdsa.pub, id_rsa.pub that exists."""
    for name in DEFAULT_KEYS:
        path = Path.home() / ".ssh" / name
        if path.is_file():
            return path
    return None


def ssh_key_file(option: str | None) -> Path | None:
    """The public key file ``--ssh-key`` names (``none``: none), else the default one."""
    if option is None:
        return default_public_key()
    if option.lower() == "none":
        return None
    return Path(option).expanduser()


def read_public_key(path: Path) -> str:
    """The public key line of ``path``, checked; a private key file is refused unread."""
    from troupe.cluster.keys import check_public_key

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--ssh-key: cannot read {path}: {e}", 2)
    if "PRIVATE KEY" in text:
        fail(f"--ssh-key: {path} is a private key; give its .pub file", 2)
    try:
        return check_public_key(text)
    except ValueError as e:
        fail(f"--ssh-key: {path}: {e}", 2)


def _ssh_dir() -> Path:
    from troupe.api.defaults import config_dir

    d = config_dir() / "ssh"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def remember_identity(public_key_file: Path) -> None:
    """Records which private key goes with a public key given at create (for ssh-config)."""
    import json

    path = _ssh_dir() / "identities.json"
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        known = {}
    blob = key_blob(public_key_file.read_text())
    known[blob] = str(public_key_file.with_suffix("")) if public_key_file.suffix == ".pub" else ""
    path.write_text(json.dumps(known, indent=1) + "\n")


def find_identity(public_key: str) -> Path | None:
    """The private key file of ``public_key``: the one recorded at create, else a
    ``~/.ssh/*.pub`` with that key, whose private twin exists."""
    import json

    if not public_key:
        return None
    blob = key_blob(public_key)
    path = _ssh_dir() / "identities.json"
    try:
        recorded = json.loads(path.read_text()).get(blob) if path.exists() else None
    except (OSError, ValueError):
        recorded = None
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    for pub in sorted((Path.home() / ".ssh").glob("*.pub")):
        try:
            if key_blob(pub.read_text()) == blob and pub.with_suffix("").is_file():
                return pub.with_suffix("")
        except OSError:
            continue
    return None


def troupe_command() -> list[str]:
    """How to run this very troupe again (ProxyCommand): its script, else ``python -m``."""
    me = Path(sys.argv[0])
    if me.name == "troupe" and me.is_file() and os.access(me, os.X_OK):
        return [str(me.absolute())]
    return [sys.executable, "-m", "troupe"]


def proxy_command(ref: str, kernel: str = "main1") -> str:
    """``troupe session tunnel REF`` as a shell command line, with the settings of this
    shell that a program started by ssh (VS Code too) might lack."""
    env = [
        f"{k}={os.environ[k]}" for k in ("TROUPE_API_URL", "TROUPE_CONFIG_DIR") if os.environ.get(k)
    ]
    argv = [*(["env", *env] if env else []), *troupe_command(), "session", "tunnel", ref]
    if kernel != "main1":
        argv += ["--kernel", kernel]
    return shlex.join(argv)


def ssh_setup(name: str, identity: Path | None) -> tuple[SessionSSH, list[tuple[str, str]]]:
    """Writes the session's pinned host key into troupe's known_hosts file; returns what the
    manager says and the session's OpenSSH options."""
    with client() as c:
        info = c.session_ssh(name)
    if not info.host_key:
        fail(f"session {name!r} has no main1 host key (no kernels yet?)")
    known = _ssh_dir() / "known_hosts"
    alias = f"troupe-{info.id}"
    text = known.read_text() if known.exists() else ""
    known.write_text(known_hosts_update(text, alias, info.host_key))
    if identity is None:
        identity = find_identity(info.user_key)
    return info, host_options(info.name, proxy_command(info.id), known, alias, identity)


# -- commands ----------------------------------------------------------------------------
@app.command()
def tunnel(
    name: NameArg,
    port: Annotated[int, typer.Option(min=1, max=65535, help="port in the kernel")] = 2200,
    kernel: KernelOpt = "main1",
) -> None:
    """Join stdin/stdout to a port in main1 (sshd's by default), e.g. as ssh's ProxyCommand."""
    from troupe.client.paths import session_path
    from troupe.client.pipe import tunnel_stdio, ws_url
    from troupe.client.settings import load_settings

    url, key = load_settings()
    target = ws_url(url, session_path(name, "tunnel"), kernel=kernel, port=port)
    try:
        code = tunnel_stdio(target, key)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(code)


IdentityOpt = Annotated[
    Path | None,
    typer.Option(
        "--identity",
        "-i",
        help="private key to log in with (default: the one of the session's --ssh-key)",
        show_default=False,
    ),
]


@app.command("ssh", context_settings=COMMAND_ARGS)
def ssh(
    name: NameArg,
    command: Annotated[
        list[str] | None, typer.Argument(help="a command, after --", show_default=False)
    ] = None,
    identity: IdentityOpt = None,
) -> None:
    """Log into main1 with the system's ssh (or run a command there; its exit code is passed
    through), through the manager."""
    import shutil

    ssh_bin = shutil.which("ssh")
    if ssh_bin is None:
        fail("no ssh command found: install OpenSSH's client")
    info, options = ssh_setup(name, identity)
    argv = [ssh_bin]
    for key, value in options:
        argv += ["-o", f"{key}={value}"]
    argv += [info.name]
    if command:
        argv += ["--", *command]
    sys.stdout.flush()
    os.execv(ssh_bin, argv)


@app.command("ssh-config")
def ssh_config(name: NameArg, identity: IdentityOpt = None) -> None:
    """Print an OpenSSH Host block for the session (append it to ~/.ssh/config): ssh, scp,
    rsync, sftp and VS Code Remote-SSH then reach main1 by the session's name."""
    info, options = ssh_setup(name, identity)
    if not any(k == "IdentityFile" for k, _ in options):
        err_console.print(
            "note: no private key found for this session (create it with --ssh-key, or give"
            " --identity); ssh will try its default keys",
            markup=False,
        )
    sys.stdout.write(host_block(info.name, options))


@app.command()
def forward(
    name: NameArg,
    ports: Annotated[
        list[str], typer.Argument(help="[LOCAL:]REMOTE, e.g. 8888 or 9000:8888", show_default=False)
    ],
    kernel: KernelOpt = "main1",
) -> None:
    """Forward local ports to ports in main1 (Jupyter, TensorBoard, a web app) until Ctrl-C;
    prints each local URL."""
    import threading

    from troupe.client.paths import session_path
    from troupe.client.pipe import listen, serve_forward, ws_url
    from troupe.client.settings import load_settings

    pairs: list[tuple[int, int]] = []
    for spec in ports:
        first, _, last = spec.rpartition(":")
        try:
            pair = (int(first) if first else int(last), int(last))
        except ValueError:
            fail(f"{spec!r}: give [LOCAL:]REMOTE port numbers", 2)
        if not (0 <= pair[0] <= 65535 and 1 <= pair[1] <= 65535):
            fail(f"{spec!r}: ports are 1-65535 (LOCAL 0: any free port)", 2)
        pairs.append(pair)
    with client() as c:
        s = c.get_session(name)  # a wrong name fails here, not at the first connection
    url, key = load_settings()
    target = s.id
    servers = []
    for local, remote in pairs:
        try:
            srv = listen(local)
        except OSError as e:
            fail(f"cannot listen on 127.0.0.1:{local}: {e.strerror or e}")
        servers.append(srv)
        bound = srv.getsockname()[1]
        endpoint = ws_url(url, session_path(target, "tunnel"), kernel=kernel, port=remote)
        threading.Thread(target=serve_forward, args=(srv, endpoint, key), daemon=True).start()
        console.print(f"http://127.0.0.1:{bound} -> {s.name} {kernel}:{remote}", markup=False)
    err_console.print("forwarding; Ctrl-C to stop", markup=False)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        for srv in servers:
            srv.close()
    raise typer.Exit(0)


@app.command()
def cp(
    src: Annotated[str, typer.Argument(help="NAME:PATH, NAME/KERNEL:PATH or a local path")],
    dst: Annotated[str, typer.Argument(help="NAME:PATH, NAME/KERNEL:PATH or a local path")],
) -> None:
    """Copy files or directories between here and a kernel (NAME:PATH is main1, NAME/sub1:PATH
    or NAME/worker2:PATH another kernel; relative paths are under /home/work), as user work,
    streamed."""
    from troupe.client.paths import session_path
    from troupe.client.pipe import download, upload, ws_url
    from troupe.client.settings import load_settings

    a, b = parse_remote(src), parse_remote(dst)
    if (a is None) == (b is None):
        fail(
            "exactly one of SRC and DST must be NAME[/KERNEL]:PATH (write ./x:y for a local"
            " path with a colon)",
            2,
        )
    url, key = load_settings()
    try:
        if a is not None:
            if a.path == "/":
                fail("cannot copy the whole file system", 2)
            endpoint = ws_url(
                url, session_path(a.session, "archive"), op="get", kernel=a.kernel, path=a.path
            )
            download(endpoint, key, a.name, Path(dst))
        else:
            assert b is not None
            local = Path(os.path.abspath(src))
            endpoint = ws_url(
                url,
                session_path(b.session, "archive"),
                op="put",
                kernel=b.kernel,
                path=b.path,
                name=local.name,
            )
            upload(endpoint, key, local)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
