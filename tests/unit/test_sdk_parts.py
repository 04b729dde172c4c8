"""The SDK's call groups (sdk_events, sdk_registries, sdk_users) reach the server through the
client's one ``_req``, typed by one protocol (sdk_requests.Requests): no group has its own
stand-in or its own copy of the protocol."""

from __future__ import annotations

import re
from pathlib import Path

from troupe.client import sdk
from troupe.client.sdk_events import EventReads
from troupe.client.sdk_registries import RegistryCalls
from troupe.client.sdk_users import UserCalls

CLIENT = Path(sdk.__file__).parent


def test_one_request_method_and_one_protocol() -> None:
    defining = sorted(p.name for p in CLIENT.glob("*.py") if "def _req(" in p.read_text())
    assert defining == ["sdk.py", "sdk_requests.py"]
    protocols = [
        p.name for p in CLIENT.glob("*.py") if re.search(r"class \w+\(Protocol\)", p.read_text())
    ]
    assert protocols == ["sdk_requests.py"]


def test_the_client_requests_with_its_own_method() -> None:
    for part in (EventReads, RegistryCalls, UserCalls):
        assert "_req" not in vars(part), part
    assert sdk.Client._req is vars(sdk.Client)["_req"]
