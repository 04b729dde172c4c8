"""Pydantic's validation errors become rules in words (api/rule_words.py): what the API
answers and the CLI prints, and the web UI shows next to the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from troupe.api.edge import validation_error
from troupe.api.models import NAME_RULE, ExecRequest, SessionCreate
from troupe.api.rule_words import location
from troupe.client.cli.status_text import validation_message

BASE = {"name": "ok", "image": "troupe/base:0.1.0"}


def error_of(data: dict[str, Any], model: Any = SessionCreate) -> tuple[str | None, str]:
    with pytest.raises(ValidationError) as e:
        model.model_validate(data)
    err = validation_error(RequestValidationError(e.value.errors()))
    return err.field, err.message


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "Bad Name"}, "name", f"name: must be {NAME_RULE}"),
        ({"name": ""}, "name", f"name: must be {NAME_RULE}"),
        ({"name": "x" * 64}, "name", f"name: must be {NAME_RULE}"),
        (
            {"mounts": [{"folder": "a b"}]},
            "mounts[0].folder",
            f"mounts[0].folder: must be {NAME_RULE}",
        ),
        ({"resources": {"cpu": 0}}, "resources.cpu", "resources.cpu: must be more than 0"),
        ({"resources": {"cpu": "x"}}, "resources.cpu", "resources.cpu: must be a number"),
        ({"resources": {"gpu": -1}}, "resources.gpu", "resources.gpu: must be at least 0"),
        ({"cluster_size": 0}, "cluster_size", "cluster_size: must be at least 1"),
        ({"priority": 101}, "priority", "priority: must be at most 100"),
        ({"idle_timeout": 3}, "idle_timeout", "idle_timeout: must be at least 10"),
        (
            {"roles": [{"name": "w", "replicas": "x"}]},
            "roles[0].replicas",
            "roles[0].replicas: must be a whole number",
        ),
        (
            {"roles": [{"name": "w", "resources": {"cpu": 0}}]},
            "roles[0].resources.cpu",
            "roles[0].resources.cpu: must be more than 0",
        ),
        ({"environ": {"A": 1}}, "environ.A", "environ.A: must be text"),
        (
            {"environ": {"1A": "x"}},
            "environ",
            "environ: '1A' is not a valid variable name (letters, digits and '_', not starting"
            " with a digit)",
        ),
    ],
)
def test_an_error_names_its_field_and_the_rule_in_words(
    data: dict[str, Any], field: str, message: str
) -> None:
    assert error_of({**BASE, **data}) == (field, message)


@pytest.mark.parametrize(
    "data",
    [
        {"roles": [{"name": "w"}, {"name": "v", "resources": {"mem": "lots"}}]},
        {"mounts": [{"folder": "a b"}]},
        {"resources": {"cpu": 0}},
        {"name": "Bad Name"},
    ],
)
def test_the_cli_words_an_error_as_the_api_does(data: dict[str, Any]) -> None:
    """A session file's error (CLI, before sending) and the API's answer to the same request
    name the field alike: ``roles[1].resources.mem``, not ``roles.1.resources.mem``."""
    with pytest.raises(ValidationError) as e:
        SessionCreate.model_validate({**BASE, **data})
    assert validation_message(e.value) == error_of({**BASE, **data})[1]


def test_a_missing_field_is_required() -> None:
    assert error_of({"name": "ok"}) == ("image", "image: required")


def test_a_kernel_name_says_what_a_kernel_is() -> None:
    field, message = error_of({"command": ["true"], "kernel": "Main1"}, ExecRequest)
    assert field == "kernel" and message.startswith("kernel: must be main1 or a kernel of a role")


def test_no_regular_expression_is_quoted() -> None:
    _, message = error_of({**BASE, "name": "-x"})
    assert "pattern" not in message and "^" not in message


def test_locations_index_lists_as_the_api_names_fields() -> None:
    assert location(("body", "roles", 1, "resources", "mem")) == "roles[1].resources.mem"
    assert location(("query", "since")) == "since"
    assert location(("body",)) is None
