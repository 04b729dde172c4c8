"""A real Prometheus server (Debian's ``prometheus`` package, installed by scripts/setup.sh)
for the tests: started on loopback with its storage in a temporary folder, scraping the given
targets every second, stopped by its own pid."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port

#: The scrape configuration docs/metrics.md shows, for a test: one job with the scrape token
#: and one without it (its scrapes fail: troupe answers 401).
CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: troupe
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: {token}
    static_configs:
      - targets: ["{target}"]
  - job_name: troupe-without-token
    metrics_path: /metrics
    static_configs:
      - targets: ["{target}"]
"""


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: Any) -> Any:
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        result: list[dict[str, Any]] = self.api("query", query=promql)["result"]
        return result

    def targets(self) -> dict[str, dict[str, Any]]:
        """The active targets by job."""
        return {t["labels"]["job"]: t for t in self.api("targets")["activeTargets"]}


@contextmanager
def prometheus(tmp: Path, target: str, token: Path) -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` (``host:port``) with the token in the file ``token``."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus missing; run scripts/setup.sh first")
    (tmp / "prometheus.yml").write_text(CONFIG.format(token=token, target=target))
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "prometheus did not get ready in 60 s"
            time.sleep(0.2)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
