"""A page of ``GET /v1/sessions`` is sent as plain data dumped with orjson
(troupe.manager.reads.wire.session_wire), not through the SessionInfo models: for any stored
values, that JSON is the models' own (same keys, same order, same values)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.api.lifecycle import KernelStatus, SessionStatus
from troupe.api.models import SessionInfo, SessionType
from troupe.cluster.contract import ClusterMode, DistEnvMode
from troupe.manager.reads.wire import KERNEL_KEYS, SESSION_KEYS, session_wire

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True)
texts = st.text(max_size=12)
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1))
stamps = st.dictionaries(texts, times.map(lambda t: t.isoformat() + "Z"), max_size=4)
phase_stamps = st.fixed_dictionaries(
    {},
    optional={
        k: times.map(lambda t: t.isoformat() + "Z")
        for k in ("SCHEDULED", "network", "RUNNING", "created", "started", "entrypoint", "ready")
    },
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def stored(draw: st.DrawFn) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """A session's and its kernels' stored values, as the list's query returns them."""
    size = draw(st.integers(1, 4))
    s: dict[str, Any] = {
        "id": draw(texts),
        "name": draw(names),
        "status": draw(st.sampled_from(SessionStatus)),
        "status_info": draw(st.dictionaries(texts, json_values, max_size=3)),
        "type": draw(st.sampled_from(SessionType)),
        "image": draw(texts),
        "cluster_size": size,
        "cluster_mode": draw(st.sampled_from(ClusterMode)),
        "cpu": draw(st.floats(0.01, 1024) | st.integers(1, 1024)),
        "mem": draw(st.integers(1, 2**40)),
        "gpu": draw(st.integers(0, 64)),
        "mounts": draw(
            st.lists(
                st.fixed_dictionaries(
                    {"folder": names, "readonly": st.booleans()},
                    optional={"host_path": texts},  # stored, never shown
                ),
                max_size=2,
            )
        ),
        "dist_env": draw(st.sampled_from(DistEnvMode)),
        "group": draw(texts),
        "priority": draw(st.integers(-100, 100)),
        "uid": draw(st.integers(0, 2**31)),
        "gid": draw(st.integers(0, 2**31)),
        "isolated_network": draw(st.booleans()),
        "network": draw(st.none() | texts),
        "subnet": draw(st.none() | texts),
        "exit_code": draw(st.none() | st.integers(-255, 255)),
        "created_at": draw(times),
        "started_at": draw(st.none() | times),
        "terminated_at": draw(st.none() | times),
        "timeline": draw(phase_stamps | stamps),
        "time_limit": draw(st.none() | st.integers(1, 366 * 86400)),
        "stop_grace": draw(st.integers(0, 3600)),
        "idle_timeout": draw(st.none() | st.integers(10, 366 * 86400)),
        "idle_since": draw(st.none() | times),
        "max_restarts": draw(st.integers(0, 100)),
        "no_restart_exit_codes": draw(st.lists(st.integers(0, 255), max_size=3)),
        "success_policy": draw(st.sampled_from(["main", "all"])),
        "restarts": draw(st.integers(0, 100)),
        "restart_history": draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "attempt": st.integers(0, 100),
                        "kernel": names,
                        "reason": texts,
                        "exit_code": st.none() | st.integers(-255, 255),
                        "oom_killed": st.booleans(),
                        "last_logs": st.lists(texts, max_size=2),
                        "at": times.map(lambda t: t.isoformat() + "Z"),
                    }
                ),
                max_size=2,
            )
        ),
    }
    kernels = [
        {
            "session_id": s["id"],
            "id": draw(texts),
            "hostname": "main1" if i == 0 else f"sub{i}",
            "role": "main" if i == 0 else "sub",
            "idx": 1 if i == 0 else i,
            "rank": i,
            "agent_id": draw(st.none() | texts),
            "container_id": draw(st.none() | texts),
            "ip": draw(st.none() | texts),
            "status": draw(st.sampled_from(KernelStatus)),
            "exit_code": draw(st.none() | st.integers(-255, 255)),
            "oom_killed": draw(st.booleans()),
            "timeline": draw(phase_stamps),
            "gpus": draw(st.none() | st.lists(texts, max_size=2)),
            "image": draw(texts),
            "cpu": draw(st.floats(0.1, 64)),
            "mem": draw(st.integers(1, 2**40)),
            "gpu": draw(st.integers(0, 8)),
        }
        for i in range(size)
    ]
    assert set(s) == set(SESSION_KEYS) and all(set(k) == set(KERNEL_KEYS) for k in kernels)
    return s, draw(names), kernels


@settings(max_examples=300, deadline=None)
@given(stored())
def test_the_lists_json_is_the_models(case: tuple[dict[str, Any], str, list[Any]]) -> None:
    s, owner, kernels = case
    data = session_wire(s, owner, kernels)
    sent = orjson.dumps(data)
    model = SessionInfo.model_validate(data).model_dump_json()
    # objects as lists of (key, value): the same keys in the same order, the same values
    assert json.loads(sent, object_pairs_hook=list) == json.loads(model, object_pairs_hook=list)
