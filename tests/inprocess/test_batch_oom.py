"""A batch session whose command (main1) is killed for memory says so in its ``status_info``,
not only on the kernel: the exit code alone (137) reads like any SIGKILL (docs/lifecycle.md,
"What each failure looks like")."""

from __future__ import annotations

from tests.inprocess.conftest import Harness
from tests.inprocess.helpers import running


async def test_batch_killed_for_memory_says_so(manager: Harness) -> None:
    s = await running(
        manager,
        "hog",
        type="batch",
        startup_command="python hog.py",
        cluster_size=2,
        resources={"mem": "1g"},
    )
    await manager.local.exit_kernel(s["id"], "main1", 137, oom=True)
    s = await manager.wait("hog", until="final")
    assert (s["status"], s["exit_code"]) == ("TERMINATED", 137), s
    assert s["status_info"] == {
        "reason": "main1 killed: out of memory (limit 1g)",
        "kernel": "main1",
        "exit_code": 137,
        "oom_killed": True,
    }
    main1 = next(k for k in s["kernels"] if k["hostname"] == "main1")
    assert main1["oom_killed"] and main1["exit_code"] == 137


async def test_batch_that_ends_on_its_own_is_no_oom(manager: Harness) -> None:
    s = await running(manager, "job", type="batch", startup_command="exit 137")
    await manager.local.exit_kernel(s["id"], "main1", 137)
    s = await manager.wait("job", until="final")
    assert s["status_info"] == {"reason": "batch command finished", "exit_code": 137}
