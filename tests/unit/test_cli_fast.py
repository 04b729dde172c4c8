"""The CLI's cheap stand-ins agree with what they stand for, and the short commands start
without the heavy modules (docs: troupe.client.cli.choices, troupe.client.cli.params)."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest

from troupe.api import models
from troupe.client.cli import choices, table
from troupe.cluster import contract


@pytest.mark.parametrize(
    ("mirror", "real"),
    [
        (choices.SessionType, models.SessionType),
        (choices.ClusterMode, contract.ClusterMode),
        (choices.DistEnvMode, contract.DistEnvMode),
    ],
)
def test_choices_are_the_models(mirror: type, real: type) -> None:
    assert [m.value for m in mirror] == [m.value for m in real]  # type: ignore[attr-defined]


def test_exec_user_is_the_models() -> None:
    assert typing.get_args(choices.ExecUser) == typing.get_args(models.ExecUser)


def test_create_defaults_are_the_models() -> None:
    fields = models.SessionCreate.model_fields
    for name, value in choices.CREATE_DEFAULTS.items():
        assert fields[name].get_default(call_default_factory=True) == value, name
    resources = fields["resources"].get_default(call_default_factory=True)
    assert resources.model_dump() == choices.RESOURCE_DEFAULTS


def test_limit_keys_are_one_set() -> None:
    """The CLI's limit names (``--reset``) and the wire models (the manager computes with
    ``users.Limits`` itself)."""
    from troupe.api import users
    from troupe.client.cli.users import LIMIT_KEYS
    from troupe.manager import quotas

    assert tuple(users.Limits.model_fields) == LIMIT_KEYS
    assert tuple(users.LimitsUpdate.model_fields) == LIMIT_KEYS
    assert quotas.Limits is users.Limits and quotas.KEYS == LIMIT_KEYS
    assert set(users.Usage.model_fields) < set(LIMIT_KEYS)


@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 1536, 512 * 1024**2, 3 * 1024**3, 1024**4 + 1])
def test_format_size_is_the_models(n: int) -> None:
    assert table.format_size(n) == models.format_size(n)


def test_short_commands_load_no_heavy_modules() -> None:
    """``troupe session exec|list`` need neither pydantic nor the server side; --help neither."""
    code = (
        "import sys\n"
        "from troupe.main import app\n"
        "from typer.main import get_command\n"
        "cmd = get_command(app)\n"
        "ctx = cmd.make_context('troupe', ['session', 'exec', 'x', '--', 'true'])\n"
        "sub = cmd.get_command(ctx, 'session')\n"
        "sub.make_context('session', ['exec', 'x', '--', 'true'], parent=ctx)\n"
        "heavy = ('pydantic', 'rich', 'httpx', 'fastapi', 'sqlalchemy', 'aiodocker',"
        " 'cryptography', 'troupe.manager', 'troupe.agent', 'troupe.api.models')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (str, "main1"),
        (list[str], ("sh", "-c", "true")),
        (choices.ExecUser, "root"),
        (choices.ClusterMode, "multi-node"),
        (choices.ClusterMode, choices.ClusterMode.SINGLE_NODE),
        (bool, True),
    ],
)
def test_plain_values_are_typers(annotation: typing.Any, value: typing.Any) -> None:
    from typer._coercion import build_runtime_param, resolve_type_descriptor
    from typer.models import OptionInfo

    from troupe.client.cli import params

    d = resolve_type_descriptor(annotation, OptionInfo())
    plain = params.plain_value(d, value, None)
    typers = build_runtime_param(d)._coerce_value(value, param=None, ctx=None)  # type: ignore[arg-type]
    assert plain == typers and type(plain) is type(typers)


def test_other_values_are_left_to_typer() -> None:
    from typer.testing import CliRunner

    from troupe.main import app

    wide = {"COLUMNS": "200"}
    r = CliRunner().invoke(app, ["session", "exec", "x", "-u", "nobody", "--", "true"], env=wide)
    assert r.exit_code == 2 and "'nobody' is not one of 'work', 'root'" in r.output, r.output
    r = CliRunner().invoke(
        app, ["session", "create", "x", "-i", "a", "--cluster-size", "z"], env=wide
    )
    assert r.exit_code == 2 and "--cluster-size" in r.output, r.output


def test_the_script_builds_only_the_group_it_runs() -> None:
    """``troupe session ...`` imports no other group's module; ``troupe --help`` and a typo
    get every group (so help lists them and Click can suggest the nearest)."""
    code = (
        "import sys\n"
        "from troupe.main import run\n"
        "sys.argv = ['troupe', *sys.argv[1:]]\n"
        "try:\n"
        "    run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "mods = ('troupe.main.server', 'troupe.main.agent', 'troupe.client.cli.users',"
        " 'troupe.client.cli.folders', 'troupe.client.cli.sessions')\n"
        "print(sorted(m for m in sys.modules if m in mods), file=sys.stderr)\n"
    )

    def loaded(*argv: str) -> tuple[str, str]:
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        return r.stdout, r.stderr.strip().splitlines()[-1]

    out, mods = loaded("session", "--help")
    assert mods == "['troupe.client.cli.sessions']" and "exec" in out, (out, mods)
    out, mods = loaded("--help")
    assert "troupe.main.server" in mods and "folder" in out, (out, mods)
    out, mods = loaded("sesion", "list")
    assert "troupe.client.cli.sessions" in mods, mods
