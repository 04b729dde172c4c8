"""Series measured as things happen, for ``GET /metrics`` (:mod:`troupe.manager.prometheus`):
kept apart so that the parts they time (the registry's scheduler loop, the request path) import
nothing of the scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

#: One registry per process (a test's second app shares it: the series only grow).
REGISTRY = CollectorRegistry(auto_describe=True)
API_LATENCY = Histogram(
    "troupe_api_request_duration_seconds",
    "API requests by method and route template, until the answer's end",
    ["method", "route"],
    registry=REGISTRY,
)
SCHEDULER_PASS = Histogram(
    "troupe_scheduler_pass_duration_seconds",
    "One scheduling pass over the pending sessions",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)
