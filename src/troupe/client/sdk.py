"""Python SDK for troupe's REST API (httpx). The CLI is built on it.

Settings: ``TROUPE_API_URL`` (default :data:`troupe.api.defaults.API_URL`) and
``TROUPE_API_KEY`` (default: the key in the credentials file the server writes on first start).

Failures raise the domain errors of :mod:`troupe.api.errors`: an error answer becomes the
class its ``code`` names (``status`` holds the HTTP status), a server out of reach becomes
:class:`~troupe.api.errors.Unreachable` (``status`` 0), a success answer it cannot read
:class:`UnexpectedAnswer`. Names go into URL paths only through :mod:`troupe.client.paths`: a
session reference that is no name or id raises :class:`~troupe.api.errors.Invalid` unsent.

Importing this module loads httpx but not the pydantic models of :mod:`troupe.api.models`: a
method loads them when it first returns one, so that ``exec_stream`` and the ``*_data``
methods (plain JSON) cost a short command line nothing more.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import httpx

from troupe.api import errors
from troupe.api import exec as exec_frames
from troupe.client.paths import api_path, session_path
from troupe.client.sdk_events import EventReads
from troupe.client.sdk_registries import RegistryCalls
from troupe.client.sdk_users import UserCalls
from troupe.client.settings import load_settings, plain_http

if TYPE_CHECKING:
    from pydantic import BaseModel

    from troupe.api.metrics import AgentUsage, SessionMetrics
    from troupe.api.models import (
        AgentInfo,
        AppInfo,
        FolderInfo,
        ImageInfo,
        SessionCreate,
        SessionInfo,
        SessionSSH,
    )

__all__ = ["Client", "TroupeError", "UnexpectedAnswer", "load_settings"]

M = TypeVar("M", bound="BaseModel")

#: Kept importable from here for callers; the one class is troupe.api.errors.TroupeError.
TroupeError = errors.TroupeError


class UnexpectedAnswer(errors.TroupeError):
    """A success answer the SDK cannot read: not JSON, or not the shape the API documents
    (another program at that address, or a server of another version)."""

    code = "unexpected_answer"


def _one(model: type[M], data: Any) -> M:
    """``data`` as ``model``; :class:`UnexpectedAnswer` if it is not one."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "the answer"
        raise UnexpectedAnswer(
            f"unexpected answer from the server (not a {model.__name__}: {where}: {err['msg']})"
        ) from None


def _many(model: type[M], data: Any) -> list[M]:
    """``data`` as a list of ``model``; :class:`UnexpectedAnswer` if it is not one."""
    if not isinstance(data, list):
        raise UnexpectedAnswer(
            f"unexpected answer from the server (not a list of {model.__name__})"
        )
    return [_one(model, x) for x in data]


def _json(resp: httpx.Response) -> Any:
    """The JSON of a success answer (None if empty); :class:`UnexpectedAnswer` if it is none."""
    if not resp.content:
        return None
    try:
        return resp.json()
    except ValueError:
        kind = resp.headers.get("content-type", "no content type")
        raise UnexpectedAnswer(
            f"unexpected answer from the server (HTTP {resp.status_code}, {kind}, not JSON)"
        ) from None


def _raise_for(resp: httpx.Response) -> None:
    """The domain error of an error answer (nothing for a success)."""
    if resp.status_code < 400:
        return
    resp.read()
    try:
        body = resp.json()
    except ValueError:
        body = None
    raise errors.from_wire(resp.status_code, body, resp.text or resp.reason_phrase)


def _exec_body(command: list[str], kernel: str, user: str) -> dict[str, Any]:
    """The body of an exec request. A plainly valid one is built as it is; anything else goes
    through :class:`~troupe.api.models.ExecRequest`; what it refuses raises :class:`Invalid`."""
    plain = exec_frames.plain_request(command, kernel, user)
    if plain is not None:
        return plain
    from pydantic import ValidationError

    from troupe.api.models import ExecRequest

    try:
        body: dict[str, Any] = ExecRequest(command=command, kernel=kernel, user=user).model_dump()
    except ValidationError as e:  # refused here as the server would: a domain error
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"][:1]) or "body"
        raise errors.Invalid.field_rule(field, err["msg"]) from None
    return body


class Client(EventReads, RegistryCalls, UserCalls):
    def __init__(
        self, url: str | None = None, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        self.url, self.api_key = load_settings(url, api_key)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(
            base_url=self.url.rstrip("/") + "/v1",
            headers=headers,
            timeout=timeout,
            # loading the CA certificates takes longer than a short command: not for plain http
            verify=not plain_http(self.url),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unreachable(self, e: httpx.TransportError) -> NoReturn:
        raise errors.Unreachable(f"cannot reach troupe at {self.url}: {e}", status=0) from e

    def _req(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TransportError as e:
            self._unreachable(e)
        _raise_for(resp)
        return _json(resp)

    # sessions
    def create_session(self, req: SessionCreate) -> SessionInfo:
        from troupe.api.models import SessionInfo

        data = req.model_dump(mode="json", exclude_unset=True)
        data["name"], data["image"] = req.name, req.image
        return _one(SessionInfo, self._req("POST", "/sessions", json=data))

    def list_sessions(self, all: bool = False) -> list[SessionInfo]:
        from troupe.api.models import SessionInfo

        return _many(SessionInfo, self.list_sessions_data(all))

    def list_sessions_data(self, all: bool = False) -> list[dict[str, Any]]:
        """:meth:`list_sessions` as the JSON the server sent (no models: cheaper to load).

        The server answers a page at a time (newest first, each oldest first; ``Link: next``
        while older ones remain): every page is fetched, so all come back, oldest first."""
        pages: list[list[dict[str, Any]]] = []
        params: dict[str, Any] = {"all": all, "limit": 500}
        while True:
            try:
                resp = self._http.get("/sessions", params=params)
            except httpx.TransportError as e:
                self._unreachable(e)
            _raise_for(resp)
            page = _json(resp)
            if not isinstance(page, list) or [s for s in page if not isinstance(s, dict)]:
                raise UnexpectedAnswer("unexpected answer from the server (not a list of sessions)")
            pages.append(page)
            after = resp.links.get("next", {}).get("url")
            if not after or not page:
                return [s for page in reversed(pages) for s in page]
            before = httpx.URL(after).params.get("before")
            if not before or before == params.get("before"):
                raise UnexpectedAnswer(
                    "unexpected answer from the server (a next page that does not move on)"
                )
            params["before"] = before

    def get_session(self, ref: str) -> SessionInfo:
        from troupe.api.models import SessionInfo

        return _one(SessionInfo, self._req("GET", session_path(ref)))

    def session_spec(self, ref: str) -> SessionCreate:
        """The create request that recreates the session (``troupe session spec``)."""
        from troupe.api.models import SessionCreate

        return _one(SessionCreate, self._req("GET", session_path(ref, "spec")))

    def session_ssh(self, ref: str) -> SessionSSH:
        """main1's pinned host key and the user's key of the session (for OpenSSH)."""
        from troupe.api.models import SessionSSH

        return _one(SessionSSH, self._req("GET", session_path(ref, "ssh")))

    def wait_session(
        self, ref: str, until: str = "running", since: str | None = None, timeout: float = 30.0
    ) -> SessionInfo:
        from troupe.api.models import SessionInfo

        params: dict[str, Any] = {"until": until, "timeout": timeout}
        if since:
            params["since"] = since
        return _one(
            SessionInfo,
            self._req("GET", session_path(ref, "wait"), params=params, timeout=timeout + 10),
        )

    def set_session(self, ref: str, changes: dict[str, Any]) -> SessionInfo:
        """Changes a session's clocks (owner or admin): ``time_limit``, ``stop_grace``,
        ``idle_timeout`` as seconds or strings such as ``2h``; None: no limit."""
        from troupe.api.models import SessionInfo

        return _one(SessionInfo, self._req("PATCH", session_path(ref), json=changes))

    def destroy_session(self, ref: str) -> SessionInfo:
        from troupe.api.models import SessionInfo

        return _one(SessionInfo, self._req("DELETE", session_path(ref)))

    def logs(self, ref: str, container: str | None = None, follow: bool = False) -> Iterator[str]:
        """The lines (without newline), ``[host]``-prefixed unless ``container`` is given.

        A follow reads server-sent events: the server keeps a quiet stream alive, and a
        dropped connection is resumed where it stopped (a few tries): the last event's id,
        sent back as ``Last-Event-ID``, holds every kernel's position, so nothing is repeated
        or lost (docs/reliability.md, N7).
        """
        params: dict[str, Any] = {"follow": follow}
        if container:
            params["container"] = container
        if not follow:
            try:
                with self._http.stream(
                    "GET", session_path(ref, "logs"), params=params, timeout=60
                ) as resp:
                    _raise_for(resp)
                    yield from resp.iter_lines()
            except httpx.TransportError as e:
                self._unreachable(e)
            return
        last_id, tries = "", 0
        while True:
            try:
                with self._http.stream(
                    "GET",
                    session_path(ref, "logs"),
                    params=params,
                    headers={"Accept": "text/event-stream", "Last-Event-ID": last_id},
                    timeout=httpx.Timeout(10, read=None),
                ) as resp:
                    _raise_for(resp)
                    for event, data, event_id in _sse(resp.iter_lines()):
                        tries = 0
                        if event == "end":
                            if data.get("error"):
                                yield f"troupe: logs ended: {data['error']}"
                            return
                        last_id = event_id or last_id
                        text = data.get("text", "")
                        yield text if container else f"[{data.get('kernel')}] {text}"
                return  # ended without an end event: the server went away cleanly
            except (httpx.ReadError, httpx.RemoteProtocolError) as e:
                tries += 1
                if tries > 3:
                    self._unreachable(e)
                time.sleep(0.5 * tries)
            except httpx.TransportError as e:
                self._unreachable(e)

    def exec_stream(
        self, ref: str, command: list[str], kernel: str = "main1", user: str = "work"
    ) -> Iterator[bytes | int]:
        """Yields the command's output as it comes (bytes chunks, stdout and stderr merged),
        then its exit code (an int) last."""
        body = _exec_body(command, kernel, user)
        try:
            with self._http.stream(
                "POST", session_path(ref, "exec"), json=body, timeout=None
            ) as resp:
                _raise_for(resp)
                for line in resp.iter_lines():
                    item = exec_frames.decode(line)
                    if isinstance(item, exec_frames.ExecExit):
                        yield item.exit_code
                    elif item is not None:
                        yield item.data
        except httpx.TransportError as e:
            self._unreachable(e)

    def exec(
        self, ref: str, command: list[str], kernel: str = "main1", user: str = "work"
    ) -> tuple[int, str]:
        """Runs a command to its end: its exit code and its output as text (-1: no code)."""
        out: list[bytes] = []
        code = -1
        for item in self.exec_stream(ref, command, kernel, user):
            if isinstance(item, int):
                code = item
            else:
                out.append(item)
        return code, b"".join(out).decode(errors="replace")

    # folders, users, agents, images
    def create_folder(self, name: str) -> FolderInfo:
        from troupe.api.models import FolderInfo

        return _one(FolderInfo, self._req("POST", "/folders", json={"name": name}))

    def list_folders(self) -> list[FolderInfo]:
        from troupe.api.models import FolderInfo

        return _many(FolderInfo, self._req("GET", "/folders"))

    def delete_folder(self, name: str) -> None:
        self._req("DELETE", api_path("folders", name))

    def list_agents(self) -> list[AgentInfo]:
        from troupe.api.models import AgentInfo

        return _many(AgentInfo, self._req("GET", "/agents"))

    def remove_agent(self, name: str) -> None:
        """Forgets a LOST agent of another host (admins only; an ALIVE one: Conflict)."""
        self._req("DELETE", api_path("agents", name))

    def list_images(self) -> list[ImageInfo]:
        from troupe.api.models import ImageInfo

        return _many(ImageInfo, self._req("GET", "/images"))

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._req("GET", "/health")
        return result

    def session_metrics(self, ref: str, since: float | str | None = None) -> SessionMetrics:
        """Each kernel's samples (after ``since``: epoch seconds or RFC 3339), or a finished
        session's summary (docs/metrics.md)."""
        from troupe.api.metrics import SessionMetrics

        params = {"since": str(since)} if since is not None else {}
        return _one(SessionMetrics, self._req("GET", session_path(ref, "metrics"), params=params))

    def agent_metrics(self, name: str, since: float | str | None = None) -> AgentUsage:
        """An agent's capacity and its kernels' use over time (admins)."""
        from troupe.api.metrics import AgentUsage

        params = {"since": str(since)} if since is not None else {}
        return _one(
            AgentUsage, self._req("GET", api_path("agents", name, "metrics"), params=params)
        )

    # apps in main1 (docs/apps.md)
    def list_apps(self, ref: str) -> list[AppInfo]:
        """The apps main1's image declares, with their state and origin."""
        from troupe.api.models import AppInfo

        return _many(AppInfo, self._req("GET", session_path(ref, "apps")))

    def open_app(self, ref: str, app: str | int) -> AppInfo:
        """Starts app ``app`` (a declared name or a port number) if needed and waits until it
        answers (up to a minute): the app with a one-time link into it in ``url``."""
        from troupe.api.models import AppInfo

        path = session_path(ref, "apps", str(app))
        return _one(AppInfo, self._req("POST", path, timeout=120))


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(event name, JSON data, id) of each server-sent event; comments are skipped."""
    event, data, event_id = "message", "", ""
    for line in lines:
        if not line:
            if data:
                yield event, json.loads(data), event_id
            event, data, event_id = "message", "", ""
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
