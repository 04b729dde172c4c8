"""Image registries and pulls, as plain data shared by the manager, the agents and clients.

A registry is named by ``HOST[:PORT]`` (:func:`parse_host`), the way an image reference names
it (:func:`registry_of`: Docker's rule, the first path component when it has a dot, a colon or
is ``localhost``; else Docker Hub). A pull reports :class:`PullProgress` (bytes done / total
over the image's layers) and ends with ``done``; its credentials travel as
:class:`RegistryAuth` from the manager to the agent that pulls, never back.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, Field

from troupe.api.errors import Invalid

#: Docker's own name for Docker Hub (what an image without a registry part pulls from).
DOCKER_HUB = "docker.io"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: A reference's path and tag: lowercase components joined by /, then an optional :tag.
_PATH = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
HOST_RULE = "HOST[:PORT]: a host name or IP address, an optional port 1-65535, no scheme or path"


def parse_host(text: str) -> str:
    """``text`` as a registry's ``host[:port]`` (lowercase); :class:`Invalid` naming ``host``
    when it is anything else (a URL, a path, a bad port)."""
    raw = text.strip()
    host, port = raw, ""
    if raw.startswith("["):  # [IPv6]:port
        end = raw.find("]")
        host, port = raw[1:end] if end > 0 else "", raw[end + 1 :].removeprefix(":")
        ok = end > 0 and (not raw[end + 1 :] or raw[end + 1] == ":") and _is_ip(host, 6)
    else:
        host, _, port = raw.partition(":")
        ok = bool(_HOST.fullmatch(host)) or _is_ip(host, 4)
    if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        ok = False
    if not ok or (":" in raw and not port and not raw.startswith("[")):
        raise Invalid.field_rule("host", f"{text!r} is not {HOST_RULE}")
    return raw.lower()


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def split_image(image: str) -> tuple[str, str, str, str]:
    """``image`` as (registry, path, tag, digest) by Docker's rule; :class:`Invalid` naming
    ``image`` for a reference Docker would refuse (a malformed digest included)."""
    rest, _, digest = image.partition("@")
    first, slash, after = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, rest = first.lower(), after
    else:
        registry = DOCKER_HUB
    path, colon, tag = rest.partition(":")
    if not _PATH.fullmatch(path) or (colon and not _TAG.fullmatch(tag)):
        raise Invalid.field_rule("image", f"{image!r} is not an image reference")
    if "@" in image and not _DIGEST.fullmatch(digest):
        raise Invalid.field_rule(
            "image", f"{image!r}: a digest is sha256: and 64 lowercase hex digits"
        )
    return registry, path, tag, digest


def registry_of(image: str) -> str:
    """The registry an image reference pulls from (``docker.io`` when it names none)."""
    try:
        return split_image(image)[0]
    except Invalid:
        return DOCKER_HUB


def allowed(image: str, registries: list[str]) -> bool:
    """Whether ``image`` comes from one of ``registries`` (an empty list allows every one)."""
    return not registries or registry_of(image) in registries


class RegistryAuth(BaseModel):
    """Credentials of a registry, sent by the manager with a pull (never returned)."""

    username: str = Field(max_length=256)
    password: str = Field(max_length=16384)


class RegistryAdd(BaseModel):
    """``POST /v1/registries``: a registry and, optionally, its credentials and CA."""

    host: str = Field(max_length=300)
    username: str | None = Field(None, max_length=256)
    password: str | None = Field(None, max_length=16384)
    #: PEM of the CA that signed the registry's certificate (agents install it for the engine)
    ca_pem: str | None = Field(None, max_length=65536)


class RegistryInfo(BaseModel):
    """A configured registry as the API shows it: no secret, only whether there is one."""

    host: str
    username: str | None = None
    has_password: bool = False
    has_ca: bool = False


class PullRequest(BaseModel):
    """What the manager asks an agent to pull (the agent API's body)."""

    image: str = Field(max_length=1000)
    auth: RegistryAuth | None = None
    ca_pem: str | None = Field(None, max_length=65536)


class PullProgress(BaseModel):
    """Where a pull of ``image`` on ``agent`` stands: bytes of its layers done and in all
    (``total`` grows as the engine learns the layers' sizes), ``done`` once it ended well."""

    agent: str = ""
    image: str = ""
    done_bytes: int = 0
    total_bytes: int = 0
    done: bool = False


class PullResult(BaseModel):
    """One agent's answer to ``POST /v1/images/pull``: pulled now, or had it already."""

    agent: str
    image: str
    pulled: bool


class ImagePull(BaseModel):
    """``POST /v1/images/pull``: pull ``image`` on one agent (``agent``) or on every one."""

    image: str = Field(max_length=1000)
    agent: str | None = Field(None, max_length=128)
