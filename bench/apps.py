"""Time the app proxy (issue 22) against ``troupe session forward`` and direct access.

A real ``troupe server`` (local agent) runs a ``troupe/base`` session whose main1 serves a
directory with Python's ``http.server`` speaking HTTP/1.1 (keep-alive, as Jupyter's server
does, and with TCP_NODELAY: else its separate writes of headers and body wait out the
peer's delayed ACK, 40 ms a request; bound to 0.0.0.0, so that the host can reach it directly:
the floor). Three ways to
the same server, each over one keep-alive client:

- **proxy**: the app's origin on the manager (``Host: <port>-<session id>.apps.localhost``),
  entered with a one-time link, through the agent's kept-open tunnels;
- **forward**: ``troupe session forward`` on a local port (a tunnel per connection);
- **direct**: the container's address from the host, no troupe in the way (the floor).

For each: latency of small requests (1 KiB file, p50/p90 over ``--requests``), then time to
first byte and throughput of a ``--size`` MiB file; while the proxy streams it, the manager's
RSS is sampled every 20 ms (start, peak, end). Prints a table and writes
``bench/results/apps.json``. Usage:
    .venv/bin/python bench/apps.py [--size 200] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import common
import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "apps.json"
APP_PORT = 8124
MIB = 1024**2


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def small(c: httpx.Client, n: int, headers: dict[str, str]) -> dict[str, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        r = c.get("/small", headers=headers)
        times.append(time.perf_counter() - t)
        assert r.status_code == 200 and len(r.content) == 1024, r.status_code
    return {"p50_ms": statistics.median(times) * 1000, "p90_ms": common.p90(times) * 1000}


def big(c: httpx.Client, size: int, headers: dict[str, str], pid: int | None) -> dict[str, Any]:
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while pid is not None and not done.is_set():
            samples.append(rss_mib(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    start_rss = rss_mib(pid) if pid else None
    sampler.start()
    t = time.perf_counter()
    ttfb = None
    got = 0
    with c.stream("GET", "/big", headers=headers) as r:
        assert r.status_code == 200, r.status_code
        for chunk in r.iter_raw(1024 * 1024):
            if ttfb is None:
                ttfb = time.perf_counter() - t
            got += len(chunk)
    total = time.perf_counter() - t
    done.set()
    sampler.join()
    assert got == size, got
    out: dict[str, Any] = {"ttfb_ms": (ttfb or 0) * 1000, "mib_s": size / MIB / total}
    if pid:
        out["rss_mib"] = {"start": start_rss, "peak": max(samples), "end": rss_mib(pid)}
    return out


def enter(server: common.TroupeServer, link: str) -> tuple[str, dict[str, str]]:
    """Uses a one-time link: the manager's URL, and the headers that reach the app."""
    m = re.fullmatch(r"http://([^/]+)(/_troupe/enter\?t=.+)", link)
    assert m, link
    host, path = m.groups()
    r = httpx.get(server.url + path, headers={"Host": host})
    assert r.status_code == 303, r.text
    cookie = r.headers["set-cookie"].split(";")[0]
    return server.url, {"Host": host, "Cookie": cookie}


async def prepare(server: common.TroupeServer, size: int) -> tuple[str, str]:
    """A running session serving /small and /big in main1; its id and main1's address."""
    async with server.client() as api:
        r = await api.post("/sessions", json={"name": "bench-apps", "image": "troupe/base:0.1.0"})
        r.raise_for_status()
        sid = r.json()["id"]
        server.sessions.add(sid)
        info = await common.session_until(api, sid, "running")
        server_py = (
            "import http.server as h; h.SimpleHTTPRequestHandler.disable_nagle_algorithm = True;"
            " h.test(HandlerClass=h.SimpleHTTPRequestHandler,"
            f" ServerClass=h.ThreadingHTTPServer, protocol='HTTP/1.1', port={APP_PORT},"
            " bind='0.0.0.0')"
        )
        serve = (
            f"mkdir -p /tmp/b && cd /tmp/b && head -c 1024 /dev/zero > small &&"
            f' head -c {size} /dev/zero > big && setsid nohup python3 -c "{server_py}"'
            " > /tmp/b.log 2>&1 < /dev/null & sleep 1"
        )
        r = await api.post(f"/sessions/{sid}/exec", json={"command": ["sh", "-c", serve]})
        assert r.status_code == 200 and '"exit_code": 0' in r.text, r.text
        ip = next(k["ip"] for k in info["kernels"] if k["hostname"] == "main1")
        return sid, ip


def measure(server: common.TroupeServer, sid: str, ip: str, n: int, size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    while True:  # (409 until the server in main1 listens: a busy machine takes a while)
        r = httpx.post(
            f"{server.url}/v1/sessions/{sid}/apps/{APP_PORT}",
            headers={"Authorization": f"Bearer {server.key}"},
        )
        if r.status_code != 409 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    r.raise_for_status()
    base, headers = enter(server, r.json()["url"])
    with httpx.Client(base_url=base, timeout=120) as c:
        small(c, 10, headers)  # (tunnels opened)
        out["proxy"] = {**small(c, n, headers), **big(c, size, headers, server.proc.pid)}
    env = {**os.environ, "TROUPE_CONFIG_DIR": str(server.tmp / "config")}
    fwd = subprocess.Popen(
        [sys.executable, "-m", "troupe", "session", "forward", "bench-apps", f"0:{APP_PORT}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert fwd.stdout is not None
        line = ""
        while "http://" not in line:
            line = fwd.stdout.readline()
            assert line, "troupe session forward printed no URL"
        url = re.search(r"http://127\.0\.0\.1:[0-9]+", line)
        assert url, line
        with httpx.Client(base_url=url.group(0), timeout=120) as c:
            small(c, 10, {})
            out["forward"] = {**small(c, n, {}), **big(c, size, {}, None)}
    finally:
        fwd.terminate()
        fwd.wait(10)
    with httpx.Client(base_url=f"http://{ip}:{APP_PORT}", timeout=120) as c:
        small(c, 10, {})
        out["direct"] = {**small(c, n, {}), **big(c, size, {}, None)}
    return out


def report(result: dict[str, Any]) -> None:
    print(f"{'way':8} {'p50 ms':>8} {'p90 ms':>8} {'TTFB ms':>8} {'MiB/s':>8}")
    for way, r in result["ways"].items():
        print(
            f"{way:8} {r['p50_ms']:8.2f} {r['p90_ms']:8.2f} {r['ttfb_ms']:8.1f} {r['mib_s']:8.0f}"
        )
    p, d = result["ways"]["proxy"], result["ways"]["direct"]
    print(
        f"added latency p50: {p['p50_ms'] - d['p50_ms']:.2f} ms;"
        f" throughput: {100 * p['mib_s'] / d['mib_s']:.0f}% of direct"
    )
    print(f"manager RSS during the download (MiB): {p['rss_mib']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=200, help="MiB of the large file")
    ap.add_argument("--requests", type=int, default=200, help="small requests per way")
    args = ap.parse_args()
    size = args.size * MIB
    server = common.start_server()
    try:
        sid, ip = asyncio.run(prepare(server, size))
        ways = measure(server, sid, ip, args.requests, size)
        result = {"size_mib": args.size, "requests": args.requests, "ways": ways}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        report(result)
    finally:
        asyncio.run(common.destroy_all(server))
        common.stop_server(server)


if __name__ == "__main__":
    main()
