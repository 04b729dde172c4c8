"""Role layouts and queue keys interned (troupe.manager.scheduler_shapes): equal values are one
object, hashed and compared by identity; a table keeps only the values still held."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

from troupe.manager import scheduler_shapes
from troupe.manager.scheduler import Part, Request
from troupe.manager.scheduler_backlog import Backlog
from troupe.manager.scheduler_shapes import Key, Roles, key_of, roles_of

G = 2**30


def layout(cpu: float) -> tuple[Part, ...]:
    return (Part("main", 1, cpu, G), Part("worker", 2, 2 * cpu, 2 * G))


def req(sid: str, cpu: float) -> Request:
    return Request(sid, "default", "multi-node", 3, cpu, G, parts=layout(cpu))


def test_requests_with_equal_roles_share_one_layout_and_one_queue() -> None:
    a, b = req("a", 1.5), req("b", 1.5)
    assert type(a.parts) is Roles and a.parts is b.parts
    assert a.parts == layout(1.5) and a == replace(b, session_id="a")
    assert a.key is b.key and hash(a.key) == hash(b.key)  # one key: found by identity
    assert req("c", 2.5).parts is not a.parts
    assert Request("p", "default", "multi-node", 2, 1.0, G).parts == ()  # plain: no layout
    backlog = Backlog()
    backlog.add_all([a, b, req("c", 2.5)])
    backlog.run()  # (the pass makes the queues)
    assert len(backlog.queues) == 2
    q = backlog.queues[a.key]
    assert a.parts.made is not None and q.plan == a.parts.made[1]  # made once per layout
    assert q.whole == (1.5 + 2 * 3.0, 5 * G, 0)


def test_the_sweep_drops_only_the_layouts_nothing_holds() -> None:
    kept = req("kept", 0.125)
    roles_of(layout(0.375))  # held by nothing
    assert layout(0.375) in roles_of.known
    roles_of.sweep()
    assert layout(0.375) not in roles_of.known
    assert roles_of(layout(0.125)) is kept.parts  # still held by a request: the same one
    again = roles_of(layout(0.375))  # made anew, then the only one
    assert again == layout(0.375) and roles_of(layout(0.375)) is again


def test_the_table_is_swept_when_it_reaches_its_mark() -> None:
    roles_of.sweep()
    start = len(roles_of.known)
    held = [roles_of(layout(0.5 + i)) for i in range(3)]
    for i in range(roles_of.sweep_at):
        roles_of(layout(1000.0 + i))  # not held
    assert len(roles_of.known) <= max(scheduler_shapes.SWEEP_AT, 2 * (start + 3)) + 1
    assert all(roles_of(layout(0.5 + i)) is held[i] for i in range(3))


def test_queue_keys_are_interned_and_swept_like_layouts() -> None:
    """Equal keys are one object (a dict finds a session's queue without reading its key's
    items); a key nothing holds goes at the next sweep, one a request holds stays."""
    a = Request("a", "default", "single-node", 2, 0.75, G)
    b = Request("b", "default", "single-node", 2, 0.75, G)
    assert type(a.key) is Key and a.key is b.key and a.key == tuple(a.key)
    assert key_of(tuple(a.key)) is a.key
    gone = ("default", "single-node", 3, 0.875, G, 0, ())
    key_of(gone)  # held by nothing
    assert gone in key_of.known
    key_of.sweep()
    assert gone not in key_of.known
    assert key_of(tuple(a.key)) is a.key  # still held by a request: the same one


def test_a_copied_or_pickled_request_keeps_the_one_key_and_layout() -> None:
    """A pickle or a deep copy rebuilds a request without ``__post_init__``: its key and layout
    are interned again, so it still joins its shape's one queue."""
    a = req("a", 1.25)
    for b in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a), copy.copy(a)):
        assert b == a and b.key is a.key and b.parts is a.parts
    backlog = Backlog()
    backlog.add(a)
    backlog.add(replace(pickle.loads(pickle.dumps(a)), session_id="b"))
    assert len(backlog.queues) == 1
