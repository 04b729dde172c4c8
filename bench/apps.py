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

For each: latency of small requests (1 KiB file, p50/p90 over ``--requests``, the three ways
interleaved request by request), then time to first byte and throughput of a ``--size`` MiB
file (``--rounds`` downloads per way, in turn; medians); while the proxy streams it, the
manager's RSS is sampled every 20 ms (start, peak, end). The added latency is the median of
the (proxy - direct) differences of neighbouring requests and the throughput ratio the median
of the rounds' (proxy / direct): on a shared machine whose load comes and goes these compare
like with like. Prints a table and writes ``bench/results/apps.json``. Usage:
    .venv/bin/python bench/apps.py [--size 200] [--requests 200] [--rounds 3]
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


def get_small(c: httpx.Client, headers: dict[str, str]) -> float:
    t = time.perf_counter()
    r = c.get("/small", headers=headers)
    elapsed = time.perf_counter() - t
    assert r.status_code == 200 and len(r.content) == 1024, r.status_code
    return elapsed


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


def measure(
    server: common.TroupeServer, sid: str, ip: str, n: int, size: int, rounds: int
) -> dict[str, Any]:
    """The three ways side by side: small requests interleaved (proxy, forward, direct, ...)
    and ``rounds`` large downloads in turn, so that a busy machine's ups and downs fall on all
    ways alike; the added latency is the median of each (proxy - direct) pair, the throughput
    ratio the median of each round's."""
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
        ways = {
            "proxy": (httpx.Client(base_url=base, timeout=120), headers, server.proc.pid),
            "forward": (httpx.Client(base_url=url.group(0), timeout=120), {}, None),
            "direct": (httpx.Client(base_url=f"http://{ip}:{APP_PORT}", timeout=120), {}, None),
        }
        try:
            times: dict[str, list[float]] = {w: [] for w in ways}
            for _ in range(10):  # (tunnels opened, connections kept)
                for c, h, _pid in ways.values():
                    get_small(c, h)
            for _ in range(n):
                for way, (c, h, _pid) in ways.items():
                    times[way].append(get_small(c, h))
            bigs: dict[str, list[dict[str, Any]]] = {w: [] for w in ways}
            for _ in range(rounds):
                for way, (c, h, pid) in ways.items():
                    bigs[way].append(big(c, size, h, pid))
        finally:
            for c, _h, _pid in ways.values():
                c.close()
    finally:
        fwd.terminate()
        fwd.wait(10)
    out: dict[str, Any] = {}
    for way in ways:
        out[way] = {
            "p50_ms": statistics.median(times[way]) * 1000,
            "p90_ms": common.p90(times[way]) * 1000,
            "ttfb_ms": statistics.median(b["ttfb_ms"] for b in bigs[way]),
            "mib_s": statistics.median(b["mib_s"] for b in bigs[way]),
            "mib_s_rounds": [b["mib_s"] for b in bigs[way]],
        }
    rss = [b["rss_mib"] for b in bigs["proxy"]]
    out["proxy"]["rss_mib"] = {
        "start": rss[0]["start"],
        "peak": max(x["peak"] for x in rss),
        "end": rss[-1]["end"],
    }
    pairs = [p - d for p, d in zip(times["proxy"], times["direct"], strict=True)]
    ratios = [p["mib_s"] / d["mib_s"] for p, d in zip(bigs["proxy"], bigs["direct"], strict=True)]
    return {
        "ways": out,
        "added_p50_ms": statistics.median(pairs) * 1000,
        "throughput_ratio": statistics.median(ratios),
        "throughput_ratios": ratios,
    }


def report(result: dict[str, Any]) -> None:
    print(f"{'way':8} {'p50 ms':>8} {'p90 ms':>8} {'TTFB ms':>8} {'MiB/s':>8}  rounds")
    for way, r in result["ways"].items():
        rounds = " ".join(f"{x:.0f}" for x in r["mib_s_rounds"])
        print(
            f"{way:8} {r['p50_ms']:8.2f} {r['p90_ms']:8.2f} {r['ttfb_ms']:8.1f}"
            f" {r['mib_s']:8.0f}  {rounds}"
        )
    ratios = " ".join(f"{100 * x:.0f}%" for x in result["throughput_ratios"])
    print(
        f"added latency p50 (median of proxy - direct pairs): {result['added_p50_ms']:.2f} ms;"
        f" throughput: {100 * result['throughput_ratio']:.0f}% of direct (rounds: {ratios})"
    )
    print(f"manager RSS during the downloads (MiB): {result['ways']['proxy']['rss_mib']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=200, help="MiB of the large file")
    ap.add_argument("--requests", type=int, default=200, help="small requests per way")
    ap.add_argument("--rounds", type=int, default=3, help="large downloads per way")
    args = ap.parse_args()
    size = args.size * MIB
    server = common.start_server()
    try:
        sid, ip = asyncio.run(prepare(server, size))
        measured = measure(server, sid, ip, args.requests, size, args.rounds)
        result = {"size_mib": args.size, "requests": args.requests, **measured}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        report(result)
    finally:
        asyncio.run(common.destroy_all(server))
        common.stop_server(server)


if __name__ == "__main__":
    main()
