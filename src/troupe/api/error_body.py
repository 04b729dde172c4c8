"""The one error shape of the manager's and the agents' APIs, as a wire model: what
:meth:`~troupe.api.errors.TroupeError.to_wire` writes, for the OpenAPI document and clients
that validate. Apart from :mod:`troupe.api.errors` so the CLI's fast path loads no pydantic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema


class ErrorDetail(BaseModel):
    """What went wrong, as ``TroupeError.to_wire`` writes it and ``from_wire`` reads it
    (:mod:`troupe.api.errors`); the edge (:mod:`troupe.api.edge`) sets the HTTP status from
    ``code``. The one error shape of the manager's and the agents' APIs."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        pattern=r"^[a-z_]+$", description="what kind of error, e.g. not_found, quota_exceeded"
    )
    message: str = Field(min_length=1, description="for people; starts with the field it names")
    field: str | None = Field(description="the request field at fault, if one is")
    kernel: str | SkipJsonSchema[None] = Field(
        None, description="the kernel concerned (only when one is)"
    )


class ErrorBody(BaseModel):
    """Every error answer (4xx, 5xx): ``{"error": {...}}``."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail
