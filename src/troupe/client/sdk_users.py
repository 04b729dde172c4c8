"""The SDK's calls on users and keys (admins; ``get_user`` and ``rotate_key`` also for
yourself). :class:`troupe.client.sdk.Client` has these methods; they live here to keep that
module small."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from troupe.client.paths import api_path
from troupe.client.sdk_requests import Requests

if TYPE_CHECKING:
    from troupe.api.models import UserInfo
    from troupe.api.users import LimitsUpdate, UserDetail, UserListed


def _user_path(name: str | None) -> str:
    return api_path("users", "me" if name is None else name)


class UserCalls:
    def create_user(self: Requests, name: str, admin: bool = False) -> UserInfo:
        from troupe.api.models import UserInfo
        from troupe.client.sdk import _one

        return _one(UserInfo, self._req("POST", "/users", json={"name": name, "admin": admin}))

    def list_users(self: Requests) -> list[UserListed]:
        """Users (admin), each with ``revoked``."""
        from troupe.api.users import UserListed
        from troupe.client.sdk import _many

        return _many(UserListed, self._req("GET", "/users"))

    def get_user(self: Requests, name: str | None = None) -> UserDetail:
        """A user (admin; None: yourself) with ``limits`` (effective, null: none),
        ``overrides`` (set by an admin) and ``usage`` (held by active sessions)."""
        from troupe.api.users import UserDetail
        from troupe.client.sdk import _one

        return _one(UserDetail, self._req("GET", _user_path(name)))

    def set_user_limits(
        self: Requests, name: str, limits: LimitsUpdate | dict[str, Any]
    ) -> UserDetail:
        """Sets the keys given (admin): sessions, kernels, cpu, mem, gpu, streams,
        max_priority, groups; a key given None goes back to the server's default."""
        from troupe.api.users import UserDetail
        from troupe.client.sdk import _one

        if not isinstance(limits, dict):
            limits = limits.model_dump(mode="json", exclude_unset=True)
        return _one(UserDetail, self._req("PUT", _user_path(name) + "/limits", json=limits))

    def revoke_user(self: Requests, name: str) -> UserListed:
        """The user's key stops working at once (admin)."""
        from troupe.api.users import UserListed
        from troupe.client.sdk import _one

        return _one(UserListed, self._req("POST", _user_path(name) + "/revoke"))

    def rotate_key(self: Requests, name: str | None = None) -> UserInfo:
        """A new key (``api_key``, shown once) for ``name`` (admin) or yourself (None); the
        old one stops working."""
        from troupe.api.models import UserInfo
        from troupe.client.sdk import _one

        return _one(UserInfo, self._req("POST", _user_path(name) + "/rotate"))

    def delete_user(self: Requests, name: str) -> None:
        """Deletes a user without active sessions, and their folders (admin)."""
        self._req("DELETE", _user_path(name))
