"""Domain errors: what went wrong, in words of the domain, never of HTTP.

The core (manager, agent) raises these; the API edge (:mod:`troupe.api.edge`) maps each
``code`` to an HTTP status and the wire shape ``{"error": {"code", "message", "field",
"kernel"}}``; clients (the SDK, the manager's handle on a remote agent) turn that shape back
into the same classes with :func:`from_wire`, so every side handles one exception type.
"""

from __future__ import annotations

from typing import Any, ClassVar


class TroupeError(Exception):
    """Base of every domain error. ``field`` names the request field at fault, ``kernel`` the
    kernel concerned; ``status`` is the HTTP status it arrived with (clients only)."""

    code: ClassVar[str] = "error"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        kernel: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.field, self.kernel, self.status = message, field, kernel, status

    def to_wire(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.kernel is not None:
            err["kernel"] = self.kernel
        return {"error": err}


class NotFound(TroupeError):
    code = "not_found"

    @classmethod
    def of(cls, what: str, ref: str) -> NotFound:
        return cls(f"{what} {ref!r} not found")


class Invalid(TroupeError):
    """A request breaks a rule; the message starts with the field it names."""

    code = "invalid"

    @classmethod
    def field_rule(cls, field: str, rule: str) -> Invalid:
        return cls(f"{field}: {rule}", field=field)


class DoesNotFit(Invalid):
    """The request can never be placed, even on idle agents."""

    code = "does_not_fit"


class Conflict(TroupeError):
    """The request clashes with the current state (a name taken, a folder in use)."""

    code = "conflict"


class NotRunning(Conflict):
    code = "not_running"


class Unauthorized(TroupeError):
    code = "unauthorized"


class Forbidden(TroupeError):
    code = "forbidden"


class QuotaExceeded(Forbidden):
    """The request would take the user past one of their limits (see docs/reliability.md)."""

    code = "quota_exceeded"


class TooMany(TroupeError):
    """Too many concurrent requests of one kind (e.g. streams) by one user."""

    code = "too_many"


class TooLarge(TroupeError):
    code = "too_large"


class InsufficientStorage(TroupeError):
    """The server's disk is too full to take on more (a new session)."""

    code = "insufficient_storage"


class AgentFailed(TroupeError):
    """A step on an agent (or its engine) failed, or the agent cannot be reached."""

    code = "agent_failed"


class Unreachable(TroupeError):
    """A client could not reach the server at all (no HTTP status)."""

    code = "unreachable"


class Internal(TroupeError):
    code = "internal"


_BY_CODE: dict[str, type[TroupeError]] = {
    c.code: c
    for c in (
        NotFound,
        Invalid,
        DoesNotFit,
        Conflict,
        NotRunning,
        Unauthorized,
        Forbidden,
        QuotaExceeded,
        TooMany,
        TooLarge,
        InsufficientStorage,
        AgentFailed,
        Unreachable,
        Internal,
    )
}


def from_wire(status: int, body: Any, fallback: str = "") -> TroupeError:
    """The domain error for an error answer (any shape; unknown codes keep their text)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return TroupeError(fallback or f"HTTP {status}", status=status)
    cls = _BY_CODE.get(str(err.get("code")), TroupeError)
    e = cls(
        err["message"],
        field=err.get("field") if isinstance(err.get("field"), str) else None,
        kernel=err.get("kernel") if isinstance(err.get("kernel"), str) else None,
        status=status,
    )
    if cls is TroupeError:
        e.code = str(err.get("code") or "error")  # type: ignore[misc]
    return e
