"""``--role NAME:REPLICAS[,image=IMG][,cpu=C][,mem=M][,gpu=G]`` of ``troupe session create``,
as the API's ``roles`` item (docs/design.md, 'Roles'). Plain string work: the API's own rules
(names, replicas, sizes, images) are checked once, by :class:`troupe.api.models.SessionCreate`.
"""

from __future__ import annotations

from typing import Any

_KEYS = ("image", "cpu", "mem", "gpu")


def parse_role(spec: str) -> dict[str, Any]:
    """``worker:2,image=troupe/pytorch:0.1.0,cpu=0.25`` -> ``{"name": "worker", "replicas": 2,
    "image": ..., "resources": {"cpu": 0.25}}``; :class:`ValueError` naming what is wrong."""
    head, *options = spec.split(",")
    name, sep, replicas = head.partition(":")
    if not sep or not replicas.isdigit():
        raise ValueError(f"{spec!r}: must start with NAME:REPLICAS, e.g. worker:2")
    role: dict[str, Any] = {"name": name, "replicas": int(replicas)}
    resources: dict[str, Any] = {}
    for option in options:
        key, eq, value = option.partition("=")
        if not eq or key not in _KEYS:
            raise ValueError(f"{spec!r}: {option!r} is not one of image=, cpu=, mem=, gpu=")
        if key in role or key in resources:
            raise ValueError(f"{spec!r}: {key}= is given twice")
        if key == "image":
            role["image"] = value
        elif key == "cpu":
            resources["cpu"] = _number(spec, key, value, float)
        elif key == "gpu":
            resources["gpu"] = _number(spec, key, value, int)
        else:
            resources["mem"] = value
    if resources:
        role["resources"] = resources
    return role


def _number(spec: str, key: str, value: str, kind: type[float] | type[int]) -> float | int:
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{spec!r}: {key}={value!r} is not a number") from None
