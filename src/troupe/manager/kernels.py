"""Session (as stored) -> what each agent must create: env, files, mounts, command. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from troupe.api.agent import FileSpec, KernelSpec, MountSpec
from troupe.api.models import SessionType
from troupe.cluster import (
    KernelContract,
    build_cluster,
    hostfile_text,
    known_hosts_text,
    ssh_client_config_text,
    sshd_config_text,
)
from troupe.manager.store.models import Session

CONFIG = "/home/config"
HOST_KEY_IN_KERNEL = "/etc/ssh/troupe_host_ed25519_key"


@dataclass(frozen=True)
class SessionPlan:
    """The parts of a session that shape its kernels."""

    session_id: str
    owner: str
    image: str
    network: str
    batch: bool
    startup_command: str | None
    cpu: float
    mem: int
    uid: int
    gid: int
    ssh_private_key: str
    ssh_public_key: str
    #: folder name -> (folder id, read-only)
    mounts: Mapping[str, tuple[str, bool]]


def kernel_conf(plan: SessionPlan, hostname: str) -> str:
    writable = " ".join(f"/home/work/{name}" for name, (_, ro) in plan.mounts.items() if not ro)
    wait_go = 1 if plan.batch and hostname == "main1" else 0
    return (
        f"_troupe_uid={plan.uid}\n_troupe_gid={plan.gid}\n"
        f"_troupe_wait_go={wait_go}\n_troupe_chown='{writable}'\n"
    )


def kernel_specs(
    plan: SessionPlan,
    contracts: list[KernelContract],
    host_keys: Mapping[str, tuple[str, str]],
) -> list[KernelSpec]:
    """``host_keys``: hostname -> (private, public) sshd host key of that kernel."""
    hosts = [c.hostname for c in contracts]
    shared = [
        FileSpec(path=f"{CONFIG}/hostfile", content=hostfile_text(hosts)),
        FileSpec(path=f"{CONFIG}/ssh/id_cluster", content=plan.ssh_private_key, mode=0o600),
        FileSpec(path=f"{CONFIG}/ssh/id_cluster.pub", content=plan.ssh_public_key + "\n"),
        FileSpec(path=f"{CONFIG}/ssh/authorized_keys", content=plan.ssh_public_key + "\n"),
        FileSpec(path=f"{CONFIG}/ssh/config", content=ssh_client_config_text(hosts)),
        FileSpec(
            path=f"{CONFIG}/ssh/known_hosts",
            content=known_hosts_text({h: host_keys[h][1] for h in hosts}),
        ),
        FileSpec(
            path=f"{CONFIG}/ssh/sshd_config",
            content=sshd_config_text(HOST_KEY_IN_KERNEL, ".ssh/authorized_keys"),
        ),
    ]
    mounts = [
        MountSpec(folder_id=folder_id, target=f"/home/work/{name}", readonly=ro)
        for name, (folder_id, ro) in plan.mounts.items()
    ]
    specs = []
    for c in contracts:
        private, public = host_keys[c.hostname]
        files = [
            *shared,
            FileSpec(path=f"{CONFIG}/kernel.conf", content=kernel_conf(plan, c.hostname)),
            FileSpec(path=f"{CONFIG}/ssh/host_ed25519_key", content=private, mode=0o600),
            FileSpec(path=f"{CONFIG}/ssh/host_ed25519_key.pub", content=public + "\n"),
        ]
        command = (
            ["/bin/sh", "-c", plan.startup_command]
            if plan.batch and c.role == "main" and plan.startup_command
            else []
        )
        specs.append(
            KernelSpec(
                session_id=plan.session_id,
                kernel_id=c.kernel_id,
                owner=plan.owner,
                hostname=c.hostname,
                image=plan.image,
                network=plan.network,
                env=c.env,
                cpu=plan.cpu,
                mem=plan.mem,
                command=command,
                files=files,
                mounts=mounts,
            )
        )
    return specs


def session_kernel_specs(s: Session) -> list[KernelSpec]:
    """The kernel specs of a stored, placed session (its network already chosen)."""
    assert s.network is not None
    contracts = build_cluster(
        s.id,
        [k.id for k in s.kernels],
        s.cluster_mode,
        s.environ,
        s.dist_env,
    )
    plan = SessionPlan(
        session_id=s.id,
        owner=s.owner_id,
        image=s.image,
        network=s.network,
        batch=s.type == SessionType.BATCH,
        startup_command=s.startup_command,
        cpu=s.cpu,
        mem=s.mem,
        uid=s.uid,
        gid=s.gid,
        ssh_private_key=s.ssh_private_key,
        ssh_public_key=s.ssh_public_key,
        mounts={m["folder"]: (m["folder_id"], bool(m["readonly"])) for m in s.mounts},
    )
    keys = {k.hostname: (k.host_private_key, k.host_public_key) for k in s.kernels}
    return kernel_specs(plan, contracts, keys)
