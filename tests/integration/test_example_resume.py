"""examples/torch-ddp-resume on a real 3-kernel batch session: a kill of a sub kernel halfway
through restarts the whole session, which resumes from the last checkpoint in the data folder
and ends with the same final loss as an uninterrupted run (computed in one process)."""

from __future__ import annotations

import contextlib
import re
import time
import uuid

import pytest

from tests.conftest import ROOT, TORCH_IMAGE, Server, docker, remove_leftovers
from troupe.api.models import Mount, Resources, SessionCreate

pytestmark = pytest.mark.docker
EXAMPLE = ROOT / "examples" / "torch-ddp-resume"
FINAL = re.compile(r"^\[main1#(\d)\] main1: rank 0/3 attempt (\d) steps=40 final_loss=([\d.]+)")


def command() -> str:
    return (EXAMPLE / "launch.sh").read_text()


def reference_loss() -> float:
    """The uninterrupted run's final loss, as the example computes it in one process (the
    same steps, the gradients of the 3 ranks averaged by hand)."""
    out = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        f"{EXAMPLE}:/ex:ro",
        "--entrypoint",
        "python",
        TORCH_IMAGE,
        "/ex/train.py",
        "--reference",
        "3",
    ).stdout
    m = re.search(r"final_loss=([\d.]+)", out)
    assert m, out
    return float(m.group(1))


def test_killed_halfway_ends_with_the_uninterrupted_loss(server: Server) -> None:
    folder = f"ckpt-{uuid.uuid4().hex[:6]}"
    name = f"resume-{uuid.uuid4().hex[:6]}"
    sid = ""
    with server.client() as c:
        c.create_folder(folder)
        try:
            info = c.create_session(
                SessionCreate(
                    name=name,
                    image=TORCH_IMAGE,
                    cluster_size=3,
                    resources=Resources(cpu=0.5, mem=1024**3),
                    type="batch",
                    dist_env="per-container",
                    success_policy="all",
                    max_restarts=1,
                    mounts=[Mount(folder=folder)],
                    environ={"CKPT_FOLDER": folder},
                    startup_command=command(),
                )
            )
            sid = info.id
            info = c.wait_session(name, until="running", timeout=240)
            assert info.status == "RUNNING", info.status_info
            # halfway: a checkpoint of step 15 or later is there (of 40)
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                code, out = c.exec(name, ["cat", f"/home/work/{folder}/progress"])
                if code == 0 and int(out.strip() or 0) >= 15:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"no checkpoint at step 15: {out}")
            sub1 = next(k for k in c.get_session(name).kernels if k.hostname == "sub1")
            docker("kill", sub1.container_id or "")
            deadline = time.monotonic() + 600
            while not info.status.is_final and time.monotonic() < deadline:
                info = c.wait_session(name, until="final", timeout=300)
            assert (info.status, info.exit_code, info.restarts) == ("TERMINATED", 0, 1), info
            lines = list(c.logs(name, container="main1"))
            resumed = [x for x in lines if x.startswith("[main1#1] main1: attempt 1 starts")]
            assert resumed and "at step 0" not in resumed[0], lines
            finals = [m.groups() for x in lines if (m := FINAL.match(x))]
            assert [(a, b) for a, b, _ in finals] == [("1", "1")], lines
            [(_, _, loss)] = finals
            assert abs(float(loss) - reference_loss()) < 1e-4, (loss, lines)
        finally:
            with contextlib.suppress(Exception):
                c.destroy_session(name)
            remove_leftovers({sid} if sid else set())
