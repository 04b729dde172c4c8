"""What a session says when one of its kernels exits (manager/life/judging.exit_info)."""

from __future__ import annotations

from troupe.api.agent import KernelExit
from troupe.manager.life.judging import exit_info

TINI = "[FATAL tini (7)] exec /bin/sh failed: No such file or directory"


def _exit(error: str = "", logs: list[str] | None = None) -> KernelExit:
    return KernelExit(
        session_id="s", kernel_id="k", exit_code=127, error=error, last_logs=logs or []
    )


def test_a_kernel_that_could_not_run_its_command_while_preparing_names_why() -> None:
    """Docker's init starts, then cannot exec the entrypoint: the engine reports no error, the
    reason is only in the output; it becomes the message, as the start's own check says."""
    info = exit_info(_exit(logs=["", TINI, "  "]), "sub1", preparing=True)
    assert info["message"] == TINI and info["kernel"] == "sub1"
    assert info["reason"] == "kernel exited while the session was being prepared"
    # the engine's own error comes first
    assert exit_info(_exit("exec: no such file", [TINI]), "sub1", True)["message"] == (
        "exec: no such file"
    )


def test_a_running_kernels_exit_keeps_its_logs_apart() -> None:
    info = exit_info(_exit(logs=["bye"]), "main1", preparing=False)
    assert "message" not in info and info["last_logs"] == ["bye"]
    assert exit_info(_exit(), "main1", preparing=True).get("message") is None
