"""examples/torch-ddp/launch.sh carries train.py inline (it runs as one `sh -c` string in
main1): the two copies must not drift apart."""

from __future__ import annotations

from pathlib import Path

DDP = Path(__file__).resolve().parents[2] / "examples" / "torch-ddp"


def test_launch_sh_carries_train_py_unchanged() -> None:
    script = (DDP / "launch.sh").read_text()
    start = script.index("<<'PY'\n") + len("<<'PY'\n")
    end = script.index("\nPY\n", start)
    assert script[start:end] + "\n" == (DDP / "train.py").read_text()
