"""Fuzzing of the manager's REST API with Schemathesis, driven in-process.

The real FastAPI app (fake agents, SQLite in a temporary directory, no Docker: the in-process
:class:`Harness`'s settings) is reached through Schemathesis' ASGI transport, which runs the
app's lifespan itself (the ASGI lifespan protocol, i.e. the ``app.router.lifespan_context``
that the harness enters) on its own event loop; each test (one per operation) gets a fresh
manager. Every operation of the document the app serves at ``/openapi.json`` is fuzzed

- with the admin key and with no key;
- as admin on things that exist (a running session, a user, a folder, an agent of another
  host) for the operations that name one in their path;
- the agents' own endpoints with the shared agent token (registration) and with a registered
  agent's credential (heartbeats, exit reports).

Checks on every response: no 5xx, no stack trace in the body, every rejection (4xx) in the one
error shape ``{"error": {"code": str, "message": str, "field": str|null}}``; the document's
word kept (status documented for the operation, media type, body matching its schema: errors
included, see :mod:`troupe.manager.openapi`); without a key, no 2xx but the health check and
the session file's schema; and after every accepted change the listings still answer.

Bounded and deterministic: a fixed seed, derandomized generation, no example database, a few
examples per operation (plus Schemathesis' coverage cases). Long requests are kept short:
``/wait`` gets a tiny ``timeout`` and logs never ``follow``. The ``/shell`` WebSocket is not in
the OpenAPI document, so not fuzzed.
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.transport import Response
from schemathesis.generation import GenerationMode
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.inprocess.conftest import IMAGE, Harness
from troupe.manager.app import create_app

#: Examples per operation in the fuzzing phase (the coverage phase adds its own cases).
MAX_EXAMPLES = 20
#: Examples per operation without a key (no coverage phase there).
KEYLESS_EXAMPLES = 10
#: Any request that takes longer is a hang (the in-process app answers in milliseconds).
REQUEST_TIMEOUT = 10.0


def _config(coverage: bool) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "seed": 20261126,
            "request-timeout": REQUEST_TIMEOUT,
            "generation": {"mode": "all", "deterministic": True, "database": "none"},
            "phases": {
                "examples": {"enabled": True},
                # Schemathesis' deterministic cases: boundaries, wrong types, missing fields,
                # undeclared methods (many: about 100 for a session create)
                "coverage": {"enabled": coverage},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
        }
    )


#: Hypothesis' side, explicit so that no profile (e.g. Hypothesis' own "ci") changes it.
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
        # one manager per operation, shared by its examples: intended
        HealthCheck.function_scoped_fixture,
    ],
)

AGENT_TOKEN = "agent-secret"
#: What the agents of other hosts call (agent token or credential, not API keys).
AGENT_REGISTER = r"^/v1/agents/register$"
AGENT_REPORTS = r"^/v1/agents/\{name\}/(heartbeat|events)$"
AGENT_ONLY = r"^/v1/agents/(register|\{name\}/(heartbeat|events))$"
#: The things every manager starts with, named by the operations on existing things.
SESSION, USER, FOLDER, AGENT = "fuzzed", "fuzzuser", "fuzzdata", "fuzzagent"
EXISTING = {"ref": SESSION, "/v1/users/": USER, "/v1/folders/": FOLDER, "/v1/agents/": AGENT}
#: What every accepted change must leave answering.
LISTINGS = ("/v1/sessions?all=true", "/v1/agents", "/v1/users", "/v1/folders")
TRACE = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")


def _document() -> dict[str, Any]:
    """The OpenAPI document of the app (building it touches no disk; ``test_served_document``
    checks that it is the one served at /openapi.json)."""
    with tempfile.TemporaryDirectory() as tmp:
        return dict(create_app(Harness(Path(tmp)).config).openapi())


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=_config(coverage=True))
#: Without a key every request is refused (401; 400 or 422 where FastAPI rejects the body
#: before the key is looked at): a few random ones per operation suffice.
keyless = schemathesis.openapi.from_dict(DOCUMENT, config=_config(coverage=False))


@dataclass
class Api:
    harness: Harness
    app: FastAPI
    admin_key: str
    #: the credential of agent AGENT (an agent of another host, registered)
    agent_credential: str

    def auth(self, who: str) -> dict[str, str]:
        secret = {
            "admin": self.admin_key,
            "agent-token": AGENT_TOKEN,
            "agent": self.agent_credential,
        }.get(who)
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        with asgi.get_client(self.app) as client:
            return client.request(method, path, timeout=REQUEST_TIMEOUT, **kwargs)


def start(tmp: Path, **config: Any) -> Api:
    """A fresh manager (the harness's settings: fake agents, SQLite in ``tmp``) with its
    lifespan running on Schemathesis' event loop: its ASGI client starts it, and its pytest
    plugin ends it after the test (so do the fixtures, should the plugin not)."""
    h = Harness(tmp, **config)
    h.local.pull_any = True  # (a pull that fails is the agent's 502: not what is fuzzed here)
    app = h.app = create_app(h.config, h.agents, remote=h.remote)
    a = Api(h, app, "", "")
    assert a.request("GET", "/v1/health").status_code == 200
    a.admin_key = json.loads(h.config.credentials_file.read_text())["api_key"]
    return a


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Api]]:
    """A factory of started managers with other settings (e.g. ``agent_timeout=30``)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    made = itertools.count()
    try:
        yield lambda **config: start(tmp_path / f"m{next(made)}", **config)
    finally:
        asgi.shutdown_lifespans()


@pytest.fixture
def api(manager: Callable[..., Api]) -> Api:
    return manager()


@pytest.fixture
def existing(api: Api) -> Api:
    """The manager holding a running session of two kernels, a user, a folder and a
    registered agent of another host."""
    admin = api.auth("admin")
    for path, body in [
        ("/v1/sessions", {"name": SESSION, "image": IMAGE, "cluster_size": 2}),
        ("/v1/users", {"name": USER}),
        ("/v1/folders", {"name": FOLDER}),
    ]:
        r = api.request("POST", path, json=body, headers=admin)
        assert r.status_code == 201, r.text
    r = api.request("GET", f"/v1/sessions/{SESSION}/wait?timeout=5", headers=admin)
    assert r.json()["status"] == "RUNNING", r.text
    reg = {"name": AGENT, "cpu": 4, "mem": 8 * 1024**3, "address": "http://agent.test:6011"}
    r = api.request("POST", "/v1/agents/register", json=reg, headers=api.auth("agent-token"))
    assert r.status_code == 200, r.text
    api.agent_credential = r.json()["credential"]
    return api


# -- checks ---------------------------------------------------------------------------------
def no_stack_trace(ctx: CheckContext, response: Response, case: Case) -> None:
    text = response.content.decode("utf-8", "replace")
    assert not TRACE.search(text), f"stack trace in the body: {text[:500]}"


def shape_problem(status: int, content_type: str, content: bytes) -> str | None:
    """What is wrong with a rejection (``None``: nothing). Every rejection is
    ``{"error": {"code": str, "message": str, "field": str|null}}`` as JSON (``kernel``, a str,
    may come with it)."""
    if status < 400:
        return None
    if not content_type.startswith("application/json"):
        return f"error with content-type {content_type!r}: {content[:300]!r}"
    try:
        body = json.loads(content)
    except ValueError:
        return f"error body is not JSON: {content[:300]!r}"
    err = body.get("error") if isinstance(body, dict) and set(body) == {"error"} else None
    if not isinstance(err, dict):
        return f"not the error shape: {body}"
    if set(err) not in ({"code", "message", "field"}, {"code", "message", "field", "kernel"}):
        return f"error keys {sorted(err)}: {body}"
    ok = (
        isinstance(err["code"], str)
        and re.fullmatch(r"[a-z_]+", err["code"])
        and isinstance(err["message"], str)
        and err["message"]
        and (err["field"] is None or isinstance(err["field"], str))
        and isinstance(err.get("kernel", ""), str)
    )
    return None if ok else f"not the error shape: {body}"


def error_shape(ctx: CheckContext, response: Response, case: Case) -> None:
    ctype = next((v[0] for k, v in response.headers.items() if k.lower() == "content-type"), "")
    problem = shape_problem(response.status_code, ctype, response.content)
    assert problem is None, problem


#: What answers without a key: the health check and the session file's schema (for editors).
KEYLESS_PATHS = ("/v1/health", "/v1/schemas/session.json")


def not_accepted_without_key(ctx: CheckContext, response: Response, case: Case) -> None:
    if case.operation.path not in KEYLESS_PATHS:
        assert not 200 <= response.status_code < 300, "answered without a key"


#: Besides ours, Schemathesis' conformance checks: every answer's status is one the document
#: lists for the operation, its media type and its body (errors too: troupe's error model)
#: are the ones the document gives for that status.
CHECKS = [
    not_a_server_error,
    no_stack_trace,
    error_shape,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


# -- shaping and sending cases --------------------------------------------------------------
def _true(value: Any) -> bool:
    return str(value).strip().lower() in {"true", "1", "yes", "on", "t", "y"}


def prepare(case: Case, existing: bool = False) -> None:
    """Shapes a generated case so that it runs briefly and gets past the obvious refusals:

    - ``/wait`` long-polls up to ``timeout`` (30 s if none) and ``logs?follow=true`` streams
      until the session ends: a valid or missing timeout becomes a tiny one and follow is
      dropped (invalid values stay, to test their rejection);
    - half of the valid session creates (a deterministic half) name an image the fake agent
      has, so that they get past admission and start sessions;
    - ``existing``: the path names the session, user, folder or agent the manager holds.
    """
    path = case.operation.path
    params = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    if existing:
        for param in list(params):
            key = "ref" if param == "ref" else path[: path.index("{")]
            params[param] = EXISTING.get(key, params[param])
    query = case.query if isinstance(case.query, dict) else None
    if query is not None and path.endswith("/wait"):
        try:
            t = float(query.get("timeout", 30))
        except (TypeError, ValueError):
            t = -1.0
        if 0 < t <= 300:
            query["timeout"] = 0.05
    if query is not None and path.endswith("/logs") and _true(query.get("follow")):
        query["follow"] = "false"
    body = case.body
    if (
        case.operation.label == "POST /v1/sessions"
        and case.meta is not None
        and case.meta.generation.mode == GenerationMode.POSITIVE
        and isinstance(body, dict)
        and zlib.crc32(json.dumps(body, sort_keys=True, default=str).encode()) % 2 == 0
    ):
        body["image"] = IMAGE


def call(api: Api, case: Case, who: str, checks: list[Any], existing: bool = False) -> None:
    prepare(case, existing)
    response = case.call(
        base_url=f"http://{asgi.HOST}",
        headers=api.auth(who),
        timeout=REQUEST_TIMEOUT,
        app=api.app,
    )
    case.validate_response(response, checks=checks)
    status = response.status_code
    if case.operation.label == "POST /v1/users/me/rotate" and who == "admin" and status == 200:
        api.admin_key = response.json()["api_key"]  # the old key stopped working
    if case.method.upper() != "GET" and 200 <= status < 300:
        for path in LISTINGS:
            r = api.request("GET", path, headers=api.auth("admin"))
            assert r.status_code == 200 and isinstance(r.json(), list), (
                f"GET {path} answers {r.status_code} {r.text[:500]} after an accepted "
                f"{case.operation.label}:\n{case.as_curl_command()}"
            )


# -- the fuzz runs --------------------------------------------------------------------------
@schema.exclude(path_regex=AGENT_ONLY).parametrize()
@SETTINGS
def test_fuzz_as_admin(case: Case, api: Api) -> None:
    call(api, case, "admin", CHECKS)


@keyless.parametrize()
@settings(SETTINGS, max_examples=KEYLESS_EXAMPLES)
def test_fuzz_without_key(case: Case, api: Api) -> None:
    call(api, case, "none", [*CHECKS, not_accepted_without_key])


@schema.include(path_regex=r"\{").exclude(path_regex=AGENT_ONLY).parametrize()
@SETTINGS
def test_fuzz_on_existing(case: Case, existing: Api) -> None:
    """The operations on one thing, on one that exists: a running session (its logs, exec,
    wait, destroy), a user, a folder, a live agent of another host."""
    call(existing, case, "admin", CHECKS, existing=True)


@schema.include(path_regex=AGENT_REGISTER).parametrize()
@SETTINGS
def test_fuzz_agent_registration(case: Case, api: Api) -> None:
    call(api, case, "agent-token", CHECKS)


@schema.include(path_regex=AGENT_REPORTS).parametrize()
@SETTINGS
def test_fuzz_agent_reports(case: Case, existing: Api) -> None:
    """Heartbeats and kernel exit reports of a registered agent, with its credential."""
    call(existing, case, "agent", CHECKS, existing=True)


def test_served_document(api: Api) -> None:
    """What is fuzzed is what the app serves at /openapi.json."""
    assert api.request("GET", "/openapi.json").json() == DOCUMENT


# -- requests the generator cannot make -----------------------------------------------------
def refused_well(r: Any) -> str | None:
    """What is wrong with the answer to a bad request (``None``: a 4xx in the error shape)."""
    if not 400 <= r.status_code < 500:
        return f"{r.status_code} {r.text[:300]}"
    if TRACE.search(r.text):
        return f"stack trace: {r.text[:300]}"
    return shape_problem(r.status_code, r.headers.get("content-type", ""), r.content)


def test_malformed_requests_are_refused_in_the_error_shape(api: Api) -> None:
    """Bodies over the limit, bodies that are not JSON or not UTF-8, keys in odd headers,
    paths that do not decode: a 4xx in the error shape each."""
    admin = {**api.auth("admin"), "Content-Type": "application/json"}
    big = json.dumps({"name": "big", "image": "x" * (2 * 1024**2)})
    cases: list[tuple[str, str, dict[str, str], Any]] = [
        ("POST", "/v1/sessions", admin, big),
        ("POST", "/v1/folders", admin, b'{"name": "\xff"}'),
        ("POST", "/v1/folders", admin, "[" * 100_000 + "]" * 100_000),
        ("POST", "/v1/folders", admin, '{"name": "x"'),
        ("POST", "/v1/sessions", admin, '{"name": "n", "image": "\\ud800"}'),
        ("GET", "/v1/users/me", {"Authorization": "Bearer \xff\xfe"}, None),
        ("GET", "/v1/users/me", {"Authorization": "Bearer " + "k" * 20_000}, None),
        ("GET", "/v1/users/me", {"Authorization": "Basic YTpi"}, None),
        ("GET", "/v1/users/me", {"X-API-Key": api.admin_key}, None),
        ("GET", "/v1/sessions/%ED%A0%80", admin, None),
        ("DELETE", "/v1/folders/%FF", admin, None),
        ("POST", "/v1/agents/%FF/heartbeat", api.auth("agent-token"), None),
        ("GET", "/v1/nowhere", admin, None),
        ("PATCH", "/v1/sessions", admin, None),
    ]
    problems = []
    for method, path, headers, body in cases:
        r = api.request(method, path, headers=headers, data=body)
        problem = refused_well(r)
        if problem:
            problems.append(f"{method} {path} {str(body)[:60]!r}: {problem}")
    assert not problems, "\n".join(problems)


def register(api: Api, raw: str) -> Any:
    headers = {**api.auth("agent-token"), "Content-Type": "application/json"}
    return api.request("POST", "/v1/agents/register", data=raw, headers=headers)


# -- regressions: what the fuzzing found ------------------------------------------------------
# Registration once stored what it could not (a lone surrogate, an integer beyond 64 bits: an
# unhandled error, 500) and took a NaN cpu for a concurrent registration (409).
@pytest.mark.parametrize("field", ["name", "address", "group", "data_marker", "gpu_reason"])
def test_register_with_a_lone_surrogate_is_refused(api: Api, field: str) -> None:
    body = {"name": "sur", "cpu": 1, "mem": 1024**3, "address": "http://sur.test:6011"}
    raw = json.dumps({**body, field: "@"}).replace('"@"', '"\\ud800"')
    r = register(api, raw)
    assert refused_well(r) is None, refused_well(r)


@pytest.mark.parametrize("field", ["mem", "gpu", "underlay_mtu"])
def test_register_with_an_integer_beyond_64_bits_is_refused(api: Api, field: str) -> None:
    body = {"name": "wide", "cpu": 1, "mem": 1024**3, "address": "http://wide.test:6011"}
    r = register(api, json.dumps({**body, field: 10**23}))
    assert refused_well(r) is None, refused_well(r)


def test_register_with_nan_cpu_is_invalid(api: Api) -> None:
    r = register(api, '{"name": "nan", "cpu": NaN, "mem": 1024, "address": "http://nan.test:1"}')
    assert r.status_code in (400, 422) and refused_well(r) is None, r.text


# Regressions found by the fuzzer (fixed).
def test_body_over_the_limit_without_length_is_413(api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"name": "big", "image": "'
        for _ in range(3):
            yield b"x" * 1024**2
        yield b'"}'

    headers = {**api.auth("admin"), "Content-Type": "application/json"}
    r = api.request("POST", "/v1/sessions", data=chunks(), headers=headers)
    assert r.status_code == 413 and refused_well(r) is None, f"{r.status_code} {r.text}"
    assert r.json()["error"]["code"] == "too_large"


def test_exit_report_with_an_exit_code_beyond_64_bits(manager: Callable[..., Api]) -> None:
    api = manager(agent_timeout=60.0)  # no heartbeats here: the agent must not be lost
    cap = {"name": "rem", "cpu": 4, "mem": 8 * 1024**3, "group": "g2", "address": "http://r:1"}
    r = register(api, json.dumps(cap))
    assert r.status_code == 200, r.text
    agent = {"Authorization": f"Bearer {r.json()['credential']}"}
    api.harness.remotes["rem"].image_names.add(IMAGE)
    admin = api.auth("admin")
    r = api.request(
        "POST", "/v1/sessions", json={"name": "s", "image": IMAGE, "group": "g2"}, headers=admin
    )
    assert r.status_code == 201, r.text
    s = api.request("GET", "/v1/sessions/s/wait?timeout=5", headers=admin).json()
    assert s["status"] == "RUNNING" and s["kernels"][0]["agent"] == "rem", s
    ev = {"session_id": s["id"], "kernel_id": s["kernels"][0]["id"], "exit_code": 2**70}
    r = api.request("POST", "/v1/agents/rem/events", json=ev, headers=agent)
    if r.status_code != 204:  # refused: fine if well
        assert refused_well(r) is None, refused_well(r)
        return
    # accepted: the exit must be recorded (the session ends)
    r = api.request("GET", "/v1/sessions/s/wait?until=final&timeout=3", headers=admin)
    assert r.json()["status"] != "RUNNING", "the kernel's exit was lost"
