"""Restart and success rules as pure logic: the request's checks (api/policies.py), the CLI's
parsing (client/cli/policy_options.py), which command each kernel runs, and what an exit
means (manager/life/judging.py) on unsaved rows."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from troupe.api.agent import KernelExit
from troupe.api.lifecycle import Change, KernelStatus, SessionStatus, transition
from troupe.api.models import SessionCreate
from troupe.api.policies import SuccessPolicy, kernel_command
from troupe.client.cli.policy_options import exit_codes
from troupe.manager.life.judging import Outcome, judge
from troupe.manager.store.models import Kernel, Session

S, K = SessionStatus, KernelStatus


def req(**kw: object) -> SessionCreate:
    return SessionCreate.model_validate({"name": "s", "image": "troupe/base:0.1.0", **kw})


def test_defaults_are_fail_fast_and_main() -> None:
    r = req()
    assert (r.max_restarts, r.no_restart_exit_codes, r.success_policy) == (0, [], None)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 101}, "max_restarts"),
        ({"no_restart_exit_codes": [256]}, "no_restart_exit_codes"),
        ({"no_restart_exit_codes": [-3]}, "no_restart_exit_codes"),
        ({"success_policy": "any"}, "success_policy"),
        ({"success_policy": "all"}, "success_policy"),  # interactive
    ],
)
def test_bad_rules_name_their_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        req(**body)
    assert field in str(e.value)


def test_exit_codes_are_kept_sorted_once() -> None:
    assert req(no_restart_exit_codes=[2, 1, 2]).no_restart_exit_codes == [1, 2]
    r = req(type="batch", startup_command="x", success_policy="all")
    assert r.success_policy is SuccessPolicy.ALL


def test_cli_exit_codes() -> None:
    assert exit_codes("1,2, 3") == [1, 2, 3]
    with pytest.raises(ValueError, match="'x' is not an exit code"):
        exit_codes("1,x")


def test_under_all_every_kernel_runs_the_command() -> None:
    assert kernel_command(None, "run", None) is None
    assert kernel_command(SuccessPolicy.MAIN, "run", None) is None
    assert kernel_command(SuccessPolicy.ALL, "run", None) == "run"
    assert kernel_command(SuccessPolicy.ALL, "run", "own") == "own"


def session(size: int = 3, **kw: object) -> Session:
    s = Session(id="s1", status=S.RUNNING, type="batch", mem=1 << 30, timeline={}, **kw)
    s.restarts = kw.get("restarts", 0)  # type: ignore[assignment]
    s.restart_history = []
    for i in range(size):
        host, role = ("main1", "main") if i == 0 else (f"sub{i}", "sub")
        s.kernels.append(
            Kernel(id=f"k{i}", hostname=host, role=role, status=K.RUNNING, timeline={})
        )
    return s


def exit_of(s: Session, host: str, code: int, changes: list[Change]) -> Outcome | None:
    k = next(k for k in s.kernels if k.hostname == host)
    transition(k, K.EXITED, changes)
    k.exit_code = code
    ev = KernelExit(session_id=s.id, kernel_id=k.id, exit_code=code, last_logs=["bye"])
    return judge(s, k, ev, changes)


def test_a_failure_with_restarts_left_begins_a_restart() -> None:
    s = session(max_restarts=1, no_restart_exit_codes=[], success_policy="main")
    changes: list[Change] = []
    out = exit_of(s, "sub1", 137, changes)
    assert out is not None and out.ending == S.RESTARTING
    assert s.status == S.RESTARTING and s.restarts == 1
    assert all(k.status == K.RESTARTING for k in s.kernels)
    [r] = s.restart_history
    assert (r["attempt"], r["kernel"], r["exit_code"], r["last_logs"]) == (0, "sub1", 137, ["bye"])
    # the next failure, with none left, ends it with the count
    s2 = session(max_restarts=1, no_restart_exit_codes=[], success_policy="main", restarts=1)
    out = exit_of(s2, "main1", 3, [])
    assert out is not None and out.ending == S.TERMINATED and out.exit_code == 3
    assert out.info["restarts"] == 1


def test_a_no_restart_code_wins_over_restarts_left() -> None:
    s = session(max_restarts=5, no_restart_exit_codes=[2], success_policy="main")
    out = exit_of(s, "sub2", 2, [])
    assert out is not None
    assert (out.ending, out.exit_code) == (S.ERROR, 2)
    assert s.status == S.RUNNING and s.restarts == 0


def test_success_all_waits_for_every_kernel() -> None:
    s = session(max_restarts=0, no_restart_exit_codes=[], success_policy="all")
    assert exit_of(s, "sub1", 0, []) is None
    assert exit_of(s, "main1", 0, []) is None
    out = exit_of(s, "sub2", 0, [])
    assert out is not None
    assert (out.ending, out.exit_code) == (S.TERMINATED, 0)
