"""Session files: ``troupe session create [NAME] -f FILE`` and ``troupe session spec NAME``.

A session file is the API's create request (:class:`~troupe.api.models.SessionCreate`) written
in YAML (JSON is YAML too): one schema, served at ``/v1/schemas/session.json``, so every field
the request gains is a key of the file without a line here. The file is read and validated on
this side, into the same model the server validates again; flags given on the command line
override it (docs/design.md, 'Session files').
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from troupe.client.cli.output import client, fail

if TYPE_CHECKING:
    from pydantic import ValidationError

    from troupe.api.models import SessionCreate

FileOpt = typer.Option(
    "--file",
    "-f",
    help="a session file (YAML: the create request, docs/design.md); flags and NAME override"
    " its values; - reads standard input",
    show_default=False,
)


def load(path: str) -> dict[str, Any]:
    """The mapping in the file at ``path`` (``-``: standard input); one-line errors that name
    the file (and the line) for a file that cannot be read, is no YAML, or no mapping."""
    from troupe.api.specfile import SpecFileError, parse

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: cannot read the session file: {getattr(e, 'strerror', None) or e}", 2)
    try:
        return parse(text)
    except SpecFileError as e:
        fail(f"{path}: {e}", 2)


def merged(from_file: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` over the file's values: a flag replaces the file's value, but for a mapping
    (``resources``, ``environ``), where it replaces that key only."""
    out = dict(from_file)
    for key, value in flags.items():
        old = out.get(key)
        out[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
    return out


def _path(e: ValidationError) -> list[Any]:
    """Where the first error is, as keys and indexes: its ``loc``, or for a rule over several
    fields the ``roles[1].name:`` its message starts with."""
    err = e.errors()[0]
    loc = list(err.get("loc", ()))
    if loc:
        return loc
    head = re.match(r"(?:Value error, )?([a-z_][\w.\[\]]*):", str(err.get("msg", "")))
    if head is None:
        return []
    return [int(p) if p.isdigit() else p for p in re.findall(r"\w+", head.group(1))]


def _from_flag(loc: list[Any], flags: dict[str, Any]) -> bool:
    """Whether the value at ``loc`` was a flag's (so an error there names no file)."""
    node: Any = flags
    for part in loc:
        inside = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if not (inside or (isinstance(node, dict) and part in node)):
            return node is not flags and not isinstance(node, dict | list)
        node = node[part]
    return bool(loc)


def _error(e: ValidationError, path: str | None, flags: dict[str, Any]) -> str:
    from troupe.client.cli.status_text import validation_message

    message = validation_message(e)
    if path is None or _from_flag(_path(e), flags):
        return message
    return f"{path}: {message}"


def request(
    path: str | None, flags: dict[str, Any], ssh_key: str | None
) -> tuple[SessionCreate, Path | None]:
    """The create request of the file at ``path`` (if any) with ``flags`` over it, and the
    public key file of ``--ssh-key`` (``ssh_key``) it holds, if any: without the flag, your
    default key unless the file gives ``ssh_key``. A one-line error naming the file, the
    field and the rule (exit 2) if the request breaks one."""
    from pydantic import ValidationError

    from troupe.api.models import SessionCreate
    from troupe.client.cli import reach

    data = merged(load(path), flags) if path is not None else dict(flags)
    key_file = None
    if ssh_key is not None or "ssh_key" not in data:
        key_file = reach.ssh_key_file(ssh_key)
        data["ssh_key"] = reach.read_public_key(key_file) if key_file else None
        flags = {**flags, "ssh_key": data["ssh_key"]}
    for field, flag in (("name", "NAME"), ("image", "--image")):
        if field not in data:
            where = f"give {flag} or {field}: in the session file" if path else f"give {flag}"
            fail(f"{field}: required: {where}", 2)
    try:
        return SessionCreate.model_validate(data), key_file
    except ValidationError as e:
        fail(_error(e, path, flags), 2)


def spec(name: str) -> None:
    """Print the session file that recreates session ``name``."""
    from troupe.api.specfile import dump

    with client() as c:
        req = c.session_spec(name)
        sys.stdout.write(dump(req, c.url))
