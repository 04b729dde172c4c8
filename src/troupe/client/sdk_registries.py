"""The SDK's calls for image registries and pulls (a part of :class:`troupe.client.sdk.Client`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from troupe.client.paths import api_path
from troupe.client.sdk_requests import Requests

if TYPE_CHECKING:
    from troupe.api.registries import PullResult, RegistryInfo


class RegistryCalls:
    """Admins' calls: registries (their secrets go in, never come back) and pre-pulls."""

    def list_registries(self: Requests) -> list[RegistryInfo]:
        from troupe.api.registries import RegistryInfo

        return [RegistryInfo.model_validate(x) for x in self._req("GET", "/registries")]

    def add_registry(
        self: Requests,
        host: str,
        username: str | None = None,
        password: str | None = None,
        ca_pem: str | None = None,
    ) -> RegistryInfo:
        from troupe.api.registries import RegistryAdd, RegistryInfo

        body = RegistryAdd(host=host, username=username, password=password, ca_pem=ca_pem)
        return RegistryInfo.model_validate(
            self._req("POST", "/registries", json=body.model_dump(exclude_none=True))
        )

    def remove_registry(self: Requests, host: str) -> None:
        self._req("DELETE", api_path("registries", host))

    def pull_image(
        self: Requests, image: str, agent: str | None = None, timeout: float | None = None
    ) -> list[PullResult]:
        """Pulls ``image`` on ``agent`` (or every agent); returns when it is done."""
        from troupe.api.registries import PullResult

        body: dict[str, Any] = {"image": image, "agent": agent}
        data = self._req("POST", "/images/pull", json=body, timeout=timeout)
        return [PullResult.model_validate(x) for x in data]
