"""Plain values of the wire format and their rules: sizes, image references, environments.

Shared by :mod:`troupe.api.models` and :mod:`troupe.api.roles` (a role has its own image,
resources and variables), so both reject bad input with the same message.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from troupe.cluster.contract import RESERVED_ENV_PREFIX, reserved_names

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(value: object) -> int:
    """Bytes from an int or a string such as ``512m``, ``1g``, ``1.5GiB`` (binary units)."""
    if isinstance(value, bool):
        raise ValueError("must be a size such as 512m or 2g")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ValueError("must be a size such as 512m or 2g")


def format_size(n: int) -> str:
    for unit, factor in (("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


# -- image references (Docker's grammar, distribution/reference) ----------------------------
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z", re.ASCII)
_DOMAIN = re.compile(
    r"(?:(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
    r"(?:\.(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]))*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?\Z",
    re.ASCII,
)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z", re.ASCII)
_DIGEST = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}\Z", re.ASCII
)
MAX_IMAGE_LENGTH = 255


def image_reference_error(ref: str) -> str | None:
    """Why ``ref`` is no Docker image reference ``[domain/]path[:tag][@digest]`` (None: it is).

    Path components are lowercase letters and digits joined by ``.``, ``_``, ``__`` or dashes;
    the first component is a registry (``localhost``, or with a ``.`` or a ``:port``) only
    if it looks like one. So ``..``, a leading ``/``, blanks and capitals are refused.
    """
    if not ref:
        return "empty"
    if len(ref) > MAX_IMAGE_LENGTH:
        return f"longer than {MAX_IMAGE_LENGTH} characters"
    name, at, digest = ref.partition("@")
    if at and not _DIGEST.match(digest):
        return "the digest must be ALGORITHM:HEX, e.g. sha256:<64 hex digits>"
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            return "the tag must be letters, digits, _ . - (at most 128, not starting with . -)"
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        if not _DOMAIN.match(first):
            return f"{first!r} is not a registry host[:port]"
        name = rest
    for part in name.split("/"):
        if not _PATH_COMPONENT.match(part):
            return (
                f"path component {part!r} must be lowercase letters and digits, separated"
                " by . _ __ or -"
            )
    return None


#: Bytes; given as a number or a size string (the schema says both, so editors accept ``2g``).
Size = Annotated[int, BeforeValidator(parse_size, json_schema_input_type=int | str), Field(gt=0)]


def check_image(image: str) -> str:
    why = image_reference_error(image)
    if why is not None:
        shown = image if len(image) <= 80 else image[:77] + "..."
        raise ValueError(f"{shown!r} is not a valid image reference: {why}")
    return image


def check_environ(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if not ENV_NAME.match(key):
            raise ValueError(
                f"{key!r} is not a valid variable name (letters, digits and '_', not starting"
                " with a digit)"
            )
        if reserved_names({key: value}):
            raise ValueError(f"{key!r}: names starting with {RESERVED_ENV_PREFIX} are reserved")
        if "\0" in value or "\n" in value:
            raise ValueError(f"{key!r}: values may not contain NUL or newline")
    port = env.get("BACKENDAI_DIST_MASTER_PORT")
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError("BACKENDAI_DIST_MASTER_PORT must be a port number (1-65535)")
    return env
