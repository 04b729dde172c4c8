"""setup_dist_environ.sh, sourced by dash and busybox sh, against troupe.cluster.dist
(docs/contract.md, 'Environment in every kernel').

Each run starts the shell with a clean environment (PATH plus the case's variables), sources the
real script between two `set` dumps, and then lets a child process print what was exported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import string
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.cluster import DistEnvMode, build_cluster, derive_dist_env

SHELLS = [["dash"], ["busybox", "sh"]]
SHELL_IDS = ["dash", "busybox-sh"]

DIST_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "TF_CONFIG",
    "WORLD_SIZE",
    "RANK",
    "WORLD_RANK",
    "LOCAL_RANK",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "OMPI_MCA_orte_default_hostfile",
    "PRTE_MCA_prte_default_hostfile",
)
SEP = "\x1e"
DEFAULT_IFS = " \t\n"

# Sections the driver prints, separated by SEP, in this order.
_SECTIONS = (
    "args_before",
    "flags_before",
    "ifs_before",
    "set_before",
    "sourced_output",
    "set_after",
    "ifs_after",
    "flags_after",
    "args_after",
    "environ",
)
_DRIVER = r"""
{prelude}
printf '%s\037' "$#" "$@"
printf '\036'
printf '%s\036' "$-"
printf '%s|%s\036' "${{IFS+set}}" "${{IFS-}}"
set
printf '\036'
. "$1"
printf '\036'
set
printf '\036'
printf '%s|%s\036' "${{IFS+set}}" "${{IFS-}}"
printf '%s\036' "$-"
printf '%s\037' "$#" "$@"
printf '\036'
"$2" -c 'import json, os, sys; sys.stdout.write(json.dumps(dict(os.environ)))'
"""
_EXTRA_ARGS = ("first arg", "*", "")


@pytest.fixture(scope="module")
def script() -> Iterator[Path]:
    with as_file(files("troupe.runner") / "setup_dist_environ.sh") as path:
        assert path.is_file()
        yield path


# Module scope: hypothesis refuses function-scoped fixtures, and the lookup is the same anyway.
@pytest.fixture(scope="module", params=SHELLS, ids=SHELL_IDS)
def shell(request: pytest.FixtureRequest) -> list[str]:
    argv: list[str] = request.param
    found = shutil.which(argv[0])
    if found is None:
        pytest.fail(f"{argv[0]} is not installed (CI installs dash and busybox-static)")
    return [found, *argv[1:]]


@dataclass
class Run:
    args_before: list[str]
    flags_before: str
    ifs_before: str
    set_before: dict[str, str]
    sourced_output: str
    set_after: dict[str, str]
    ifs_after: str
    flags_after: str
    args_after: list[str]
    environ: dict[str, str]


_SET_ENTRY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)


def _parse_set(dump: str) -> dict[str, str]:
    """Variables of a `set` dump, name -> its text as printed (values may span lines)."""
    starts = list(_SET_ENTRY.finditer(dump))
    assert not dump[: starts[0].start() if starts else len(dump)].strip()
    return {
        m.group(1): dump[m.start() : starts[i + 1].start() if i + 1 < len(starts) else len(dump)]
        for i, m in enumerate(starts)
    }


def run_sourced(
    shell: Sequence[str], script: Path, env: Mapping[str, str], prelude: str = "set -eu"
) -> Run:
    clean_env = {"PATH": os.environ.get("PATH", os.defpath), **env}
    proc = subprocess.run(
        [
            *shell,
            "-c",
            _DRIVER.format(prelude=prelude),
            "sh",
            str(script),
            sys.executable,
            *_EXTRA_ARGS,
        ],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    parts = proc.stdout.split(SEP)
    assert len(parts) == len(_SECTIONS), proc.stdout
    raw = dict(zip(_SECTIONS, parts, strict=True))
    return Run(
        args_before=raw["args_before"].split("\x1f")[:-1],
        flags_before=raw["flags_before"],
        ifs_before=raw["ifs_before"],
        set_before=_parse_set(raw["set_before"]),
        sourced_output=raw["sourced_output"],
        set_after=_parse_set(raw["set_after"]),
        ifs_after=raw["ifs_after"],
        flags_after=raw["flags_after"],
        args_after=raw["args_after"].split("\x1f")[:-1],
        environ=json.loads(raw["environ"]),
    )


def check_against_python(run: Run, env: Mapping[str, str]) -> dict[str, str]:
    """Assert the shell did exactly what derive_dist_env says, and nothing else."""
    expected = derive_dist_env(env)
    # Exported values: derived ones added, user ones (even empty) untouched, the rest absent.
    for name in DIST_NAMES:
        assert run.environ.get(name) == env.get(name, expected.get(name)), name
    for name, value in env.items():
        assert run.environ[name] == value, name
    # Shell variables: the only change is the new variables. Neither dash nor busybox sh list
    # `_` or other self-changing specials in `set` (busybox prints LINENO and FUNCNAME empty
    # at top level), so no name needs excluding: every pre-existing entry must be identical.
    assert run.set_after.keys() - run.set_before.keys() == expected.keys()
    for name, entry in run.set_before.items():
        assert run.set_after.get(name) == entry, name
    # Nothing printed, shell options, IFS and positional parameters as they were.
    assert run.sourced_output == ""
    assert run.flags_after == run.flags_before
    assert run.ifs_after == run.ifs_before
    assert run.args_before[-len(_EXTRA_ARGS) :] == list(_EXTRA_ARGS)
    assert run.args_after == run.args_before
    return expected


def kernel_env(
    size: int,
    rank: int,
    user: Mapping[str, str] | None = None,
    per_container: bool = False,
    layout: Sequence[tuple[str, int]] | None = None,
) -> dict[str, str]:
    """The environment the agent gives kernel `rank` of a `size`-kernel session (of these
    roles, when given)."""
    ids = [f"k{i}" for i in range(size)]
    dist_env: DistEnvMode = "per-container" if per_container else "default"
    return build_cluster(ids[0], ids, "multi-node", user, dist_env, layout=layout)[rank].env


# --- the cluster matrix -------------------------------------------------------------------------


def _matrix() -> list[tuple[int, int, bool]]:
    cases = []
    for size in (1, 2, 3, 4, 5, 6, 64):
        for rank in sorted({0, size // 2, size - 1}):
            for per_container in (False, True):
                cases.append((size, rank, per_container))
    return cases


@pytest.mark.parametrize(("size", "rank", "per_container"), _matrix())
def test_cluster_matrix(
    shell: list[str], script: Path, size: int, rank: int, per_container: bool
) -> None:
    env = kernel_env(size, rank, per_container=per_container)
    run = run_sourced(shell, script, env)
    expected = check_against_python(run, env)
    if size == 1:
        assert expected == {}
        return
    hosts = env["BACKENDAI_CLUSTER_HOSTS"].split(",")
    assert run.environ["MASTER_ADDR"] == "main1"
    assert run.environ["MASTER_PORT"] == "29500"
    assert json.loads(run.environ["TF_CONFIG"]) == {
        "cluster": {"worker": [f"{h}:{29500 + i}" for i, h in enumerate(hosts)]},
        "task": {"type": "worker", "index": rank},
    }
    if per_container:
        assert run.environ["WORLD_SIZE"] == str(size)
        assert run.environ["RANK"] == run.environ["WORLD_RANK"] == str(rank)
        assert run.environ["LOCAL_RANK"] == "0"
    else:
        assert not {"WORLD_SIZE", "RANK", "WORLD_RANK", "LOCAL_RANK"} & run.environ.keys()


def test_spec_example_exact(shell: list[str], script: Path) -> None:
    env = kernel_env(4, 2)
    run = run_sourced(shell, script, env)
    check_against_python(run, env)
    assert run.environ["TF_CONFIG"] == (
        '{"cluster": {"worker": ["main1:29500", "sub1:29501", "sub2:29502", "sub3:29503"]}, '
        '"task": {"type": "worker", "index": 2}}'
    )


# --- edge cases ---------------------------------------------------------------------------------

_SIZE, _HOSTS, _RANK = (
    "BACKENDAI_CLUSTER_SIZE",
    "BACKENDAI_CLUSTER_HOSTS",
    "BACKENDAI_CLUSTER_LOCAL_RANK",
)
_DIST, _PC = "BACKENDAI_DIST_ENV", "per-container"
_H4 = {_HOSTS: "main1,sub1,sub2,sub3", _RANK: "1"}
EDGE_CASES: dict[str, dict[str, str]] = {
    "empty-environment": {},
    "size-unset": dict(_H4),
    "size-empty": {**_H4, _SIZE: ""},
    "size-non-numeric": {**_H4, _SIZE: "four"},
    "size-signed": {**_H4, _SIZE: "+4"},
    "size-spaced": {**_H4, _SIZE: " 4"},
    "size-zero": {**_H4, _SIZE: "0"},
    "size-one": {**_H4, _SIZE: "1"},
    "size-one-zero-padded": {**_H4, _SIZE: "0001"},
    "size-zero-padded": {**_H4, _SIZE: "004", _DIST: _PC},
    "size-too-long": {**_H4, _SIZE: "9" * 19, _DIST: _PC},
    "size-18-digits": {**_H4, _SIZE: "9" * 18, _DIST: _PC},
    "hosts-unset": {_SIZE: "4"},
    "hosts-empty": {_SIZE: "4", _HOSTS: ""},
    "hosts-trailing-comma": {_SIZE: "2", _HOSTS: "main1,"},
    "hosts-quote": {_SIZE: "2", _HOSTS: 'main1,s"1'},
    "hosts-glob": {_SIZE: "2", _HOSTS: "main1,*"},
    "hosts-odd-but-fine": {_SIZE: "2", _HOSTS: "a.b-c,D_9"},
    "hosts-fewer-than-size": {_SIZE: "3", _HOSTS: "main1"},
    "rank-unset": {_SIZE: "4", _HOSTS: _H4[_HOSTS]},
    "rank-non-numeric": {**_H4, _SIZE: "4", _RANK: "x"},
    "rank-zero-padded": {**_H4, _SIZE: "4", _RANK: "03"},
    "rank-too-long": {**_H4, _SIZE: "4", _RANK: "1" * 19},
    "per-container-wrong-case": {**_H4, _SIZE: "4", _DIST: "Per-Container"},
}
for _knob in ("12345", "1", "65535", "0080", "0", "65536", "", "abc", "80x", "9" * 30):
    EDGE_CASES[f"master-port-knob-{_knob[:8]!r}"] = {
        **_H4,
        _SIZE: "4",
        "BACKENDAI_DIST_MASTER_PORT": _knob,
    }
for _name in DIST_NAMES:
    for _value in ("", "user value"):
        EDGE_CASES[f"user-set-{_name}-{_value[:4] or 'empty'}"] = {
            **_H4,
            _SIZE: "4",
            _DIST: _PC,
            _name: _value,
        }
EDGE_CASES["user-set-all"] = {
    **_H4,
    _SIZE: "4",
    _DIST: _PC,
    **dict.fromkeys(DIST_NAMES, "mine"),
}


@pytest.mark.parametrize("env", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_edge_cases(shell: list[str], script: Path, env: dict[str, str]) -> None:
    check_against_python(run_sourced(shell, script, env), env)


def test_custom_master_port(shell: list[str], script: Path) -> None:
    env = kernel_env(3, 1, {"BACKENDAI_DIST_MASTER_PORT": "23456"})
    run = run_sourced(shell, script, env)
    check_against_python(run, env)
    assert run.environ["MASTER_PORT"] == "23456"
    assert json.loads(run.environ["TF_CONFIG"])["cluster"]["worker"] == [
        "main1:23456",
        "sub1:23457",
        "sub2:23458",
    ]


# --- safety when sourced ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prelude", "ifs_state"),
    [
        ("IFS=:", "set|:"),
        ("", "set|" + DEFAULT_IFS),
        ("unset IFS", "|"),
        # Field splitting on digits and commas would break any unquoted expansion in the script.
        ("IFS='0123456789,:'", "set|0123456789,:"),
    ],
    ids=["custom", "default", "unset", "hostile"],
)
@pytest.mark.parametrize("size", [1, 4])
def test_ifs_restored(
    shell: list[str], script: Path, prelude: str, ifs_state: str, size: int
) -> None:
    env = kernel_env(size, size - 1, per_container=True)
    run = run_sourced(shell, script, env, prelude=f"set -eu\n{prelude}")
    assert run.ifs_before == ifs_state
    check_against_python(run, env)  # includes ifs_after == ifs_before
    assert run.ifs_after == ifs_state


@pytest.mark.parametrize("prelude", ["", "set -u", "set -e", "set -eu", "set -a", "set -f"])
def test_shell_options(shell: list[str], script: Path, prelude: str) -> None:
    """Works with and without -e/-u (and allexport, noglob) and leaves the options as they were."""
    for env in (kernel_env(4, 3, per_container=True), kernel_env(1, 0), {}):
        run = run_sourced(shell, script, env, prelude=prelude)
        check_against_python(run, env)
        for flag in prelude.removeprefix("set -"):
            assert flag in run.flags_after


def test_no_functions_no_exit(script: Path) -> None:
    code = [line for line in script.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = "\n".join(code)
    assert not re.search(r"\bexit\b|\breturn\b", text)
    assert not re.search(r"^\s*(function\s+)?[A-Za-z_][A-Za-z0-9_]*\s*\(\s*\)", text, re.M)
    assigned = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)=", text))
    helpers = {name for name in assigned if name not in DIST_NAMES}
    assert all(name.startswith("_troupe_") for name in helpers)
    unset_line = text[text.rindex("unset ") :]
    assert helpers <= set(unset_line.replace("\\\n", " ").split())


# --- property test ------------------------------------------------------------------------------

_VALUE_CHARS = string.ascii_letters + string.digits + " ,:.'\"$`\\*?[]{}-_=;&|"
_values = st.text(alphabet=_VALUE_CHARS, max_size=12)


@st.composite
def cluster_environs(draw: st.DrawFn) -> dict[str, str]:
    size = draw(st.integers(min_value=1, max_value=64))
    rank = draw(st.integers(min_value=0, max_value=size - 1))
    user: dict[str, str] = draw(st.dictionaries(st.sampled_from(DIST_NAMES), _values))
    knob = draw(
        st.one_of(
            st.none(),
            st.integers(min_value=0, max_value=70000).map(str),
            st.text(alphabet="0123456789x", min_size=1, max_size=7),
        )
    )
    if knob is not None:
        user["BACKENDAI_DIST_MASTER_PORT"] = knob
    env = kernel_env(size, rank, user, per_container=draw(st.booleans()))
    if draw(st.integers(min_value=0, max_value=9)) == 0:  # sometimes a hand-made, odd rank
        env["BACKENDAI_CLUSTER_LOCAL_RANK"] = draw(_values)
    return env


@settings(max_examples=60, deadline=None)
@given(env=cluster_environs())
def test_shell_matches_python(shell: list[str], script: Path, env: dict[str, str]) -> None:
    run = run_sourced(shell, script, env)
    expected = check_against_python(run, env)
    if "TF_CONFIG" in expected:
        tf = json.loads(run.environ["TF_CONFIG"])
        assert set(tf) == {"cluster", "task"}
        assert len(tf["cluster"]["worker"]) == int(env["BACKENDAI_CLUSTER_SIZE"])
        assert tf["task"]["type"] == "worker"


# --- roles ------------------------------------------------------------------------------------

#: Names like TensorFlow's task types and others, so every mapping of TF_CONFIG comes up.
_ROLE_NAMES = ["chief", "worker", "ps", "evaluator", "sub", "data", "pss", "workers"]


@st.composite
def role_environs(draw: st.DrawFn) -> dict[str, str]:
    names = draw(st.lists(st.sampled_from(_ROLE_NAMES), unique=True, max_size=4))
    layout = [("main", 1)] + [(n, draw(st.integers(min_value=1, max_value=4))) for n in names]
    size = sum(r for _, r in layout)
    rank = draw(st.integers(min_value=0, max_value=size - 1))
    env = kernel_env(size, rank, per_container=draw(st.booleans()), layout=layout)
    if draw(st.integers(min_value=0, max_value=9)) == 0:  # a rank past the hosts' end
        env["BACKENDAI_CLUSTER_LOCAL_RANK"] = str(size + draw(st.integers(0, 3)))
    return env


@settings(max_examples=60, deadline=None)
@given(env=role_environs())
def test_shell_matches_python_with_roles(
    shell: list[str], script: Path, env: dict[str, str]
) -> None:
    run = run_sourced(shell, script, env)
    check_against_python(run, env)


def test_roles_tf_config_exact(shell: list[str], script: Path) -> None:
    """docs/contract.md's example: main is the chief next to a ps role; ports by position."""
    layout = [("main", 1), ("ps", 1), ("worker", 2)]
    env = kernel_env(4, 3, layout=layout)
    tf = json.loads(run_sourced(shell, script, env).environ["TF_CONFIG"])
    assert tf == {
        "cluster": {
            "chief": ["main1:29500"],
            "worker": ["worker1:29502", "worker2:29503"],
            "ps": ["ps1:29501"],
        },
        "task": {"type": "worker", "index": 1},
    }
