"""Restart and success rules of a session (docs/policies.md): the request's fields, their
checks, and the restart history the API shows. Mixed into
:class:`troupe.api.models.SessionCreate` / :class:`~troupe.api.models.SessionInfo`, so the
rules live in one place and the big wire module stays small."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field, field_validator, model_validator

#: More restarts than this is a loop, not resilience (422 naming the field).
MAX_RESTARTS = 100
#: Log lines of the failed kernel kept in each restart's record.
HISTORY_LOG_LINES = 20
#: The variable that tells every kernel which attempt it is (0 the first time).
RESTART_COUNT_VAR = "TROUPE_RESTART_COUNT"
#: Set (to 1) in the containers of a session that may restart: Docker's init (tini) then
#: forwards signals to the entrypoint's whole process group, and the entrypoint stays as the
#: kernel's supervisor, which a restart in place asks to set the kernel up again without a new
#: start of its container (runner/entrypoint.sh, runner/restart.sh).
SUPERVISED_VAR = "TINI_KILL_PROCESS_GROUP"


class SuccessPolicy(StrEnum):
    """When a batch session succeeds: its main1's command exits 0 (``main``), or every
    kernel runs the command and all of them exit 0 (``all``)."""

    MAIN = "main"
    ALL = "all"


def kernel_command(
    policy: SuccessPolicy | None, session_command: str | None, role_command: str | None
) -> str | None:
    """What a batch kernel runs: its role's command; under ``all`` the session's otherwise
    (every kernel runs it, each with its own environment)."""
    if role_command or policy is not SuccessPolicy.ALL:
        return role_command
    return session_command


class RestartRules(BaseModel):
    """The request's restart and success rules (defaults: today's fail-fast, main decides)."""

    max_restarts: int = Field(
        0,
        ge=0,
        le=MAX_RESTARTS,
        description="how often the whole session restarts after a kernel's failure (0: fail)",
    )
    no_restart_exit_codes: list[int] = Field(
        default_factory=list,
        max_length=256,
        description="exit codes (0-255) that end the session at once, with no restart",
    )
    success_policy: SuccessPolicy | None = Field(
        None, description="batch only: main (main1's command decides, the default) or all"
    )

    @field_validator("no_restart_exit_codes")
    @classmethod
    def _exit_codes(cls, codes: list[int]) -> list[int]:
        bad = [c for c in codes if not 0 <= c <= 255]
        if bad:
            raise ValueError(f"no_restart_exit_codes: {bad[0]} is not an exit code (0-255)")
        return sorted(set(codes))

    @model_validator(mode="after")
    def _fits_the_type(self) -> RestartRules:
        """A rule that makes no sense for the session's type (its ``type``, when it has one)."""
        if self.success_policy is not None and getattr(self, "type", "batch") != "batch":
            raise ValueError("success_policy: only batch sessions have a success rule")
        return self


class RestartRecord(BaseModel):
    """One restart: which attempt ended, which kernel failed, how, its last lines, when."""

    attempt: int
    kernel: str
    reason: str
    exit_code: int | None = None
    oom_killed: bool = False
    last_logs: list[str] = Field(default_factory=list)
    #: the lost agent, when the restart is a re-placement after it was lost
    agent: str | None = None
    #: when it failed, ISO 8601 UTC
    at: str


class RestartView(BaseModel):
    """What a session shows of its restarts."""

    max_restarts: int = 0
    no_restart_exit_codes: list[int] = Field(default_factory=list)
    success_policy: SuccessPolicy = SuccessPolicy.MAIN
    restarts: int = Field(0, description="how often the session restarted so far")
    restart_history: list[RestartRecord] = Field(default_factory=list)
