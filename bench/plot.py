"""Render bench/results/ready.json (from bench/ready.py) as a PNG: time against N per method,
start-up and teardown side by side, median as a line and p90 as a shaded band.

Needs matplotlib, the ``bench`` extra (``.venv/bin/pip install -e '.[bench]'``). Usage:
    .venv/bin/python bench/plot.py [bench/results/ready.json] [-o bench/results/ready.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
COLORS = {"floor": "tab:gray", "compose": "tab:orange", "troupe": "tab:blue"}


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display; only files
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for ax, what, label in zip(axes, ("up", "down"), ("start-up", "teardown"), strict=True):
        for method, per_n in result["stats"].items():
            pts = sorted(
                (int(n), s[what]["median"], s[what]["p90"])
                for n, s in per_n.items()
                if s[what]["median"] is not None
            )
            if not pts:
                continue
            ns, med, hi = zip(*pts, strict=True)
            color = COLORS.get(method)
            ax.plot(ns, med, marker="o", color=color, label=f"{method} (median)")
            ax.fill_between(ns, med, hi, color=color, alpha=0.15)
        ax.set_title(f"{label} (band: up to p90)")
        ax.set_xlabel("kernels (N)")
        ax.set_ylabel("seconds")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({int(n) for p in result["stats"].values() for n in p}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    m = result.get("meta", {})
    fig.suptitle(
        f"ready on {m.get('cpus', '?')} CPUs, docker {m.get('docker', '?')}, "
        f"{m.get('cpu', '?')} CPU / {m.get('mem', '?')} per container, git {m.get('git', '?')}"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("json", nargs="?", type=Path, default=RESULTS / "ready.json")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("matplotlib missing: .venv/bin/pip install -e '.[bench]'") from None
    out = args.out or args.json.with_suffix(".png")
    plot(json.loads(args.json.read_text()), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
