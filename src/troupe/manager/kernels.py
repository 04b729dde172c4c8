"""Session (as stored) -> what each agent must create: env, files, mounts, command. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from troupe.api.agent import FileSpec, KernelSpec, MountSpec
from troupe.api.models import SessionType
from troupe.api.policies import RESTART_COUNT_VAR, SUPERVISED_VAR
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
#: Whole GPUs of this kernel (a count; ``nvidia-smi`` inside shows the same many).
GPUS_VAR = "TROUPE_GPUS"
HOST_KEY_IN_KERNEL = "/etc/ssh/troupe_host_ed25519_key"
AUTHORIZED_KEYS = "/home/work/.ssh/authorized_keys"
#: DeepSpeed's launcher reads this hostfile when given none (its ``DLTS_HOSTFILE``).
DEEPSPEED_HOSTFILE = "/job/hostfile"


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
    #: seconds a kernel waits for its peers before it reports what is missing
    ready_timeout: int = 300
    #: whole GPUs per kernel
    gpu: int = 0
    #: the user's own public key (``--ssh-key``): main1 accepts it, sub kernels do not
    user_ssh_key: str | None = None
    #: hostname -> that kernel's own (its role's) shape; a kernel not named has the
    #: session's, and runs ``startup_command`` if it is main1
    roles: Mapping[str, KernelShape] = field(default_factory=dict)
    #: which attempt this is (TROUPE_RESTART_COUNT in every kernel; 0 the first time)
    restarts: int = 0
    #: whether the session may restart: its kernels' entrypoints stay as supervisors, so that
    #: a restart in place needs no new start of a running container (SUPERVISED_VAR)
    supervised: bool = False

    def shape(self, hostname: str) -> KernelShape:
        """The image, resources and command of the kernel ``hostname``."""
        if hostname in self.roles:
            return self.roles[hostname]
        command = self.startup_command if hostname == "main1" else None
        return KernelShape(self.image, self.cpu, self.mem, self.gpu, command)


@dataclass(frozen=True)
class KernelShape:
    """What a kernel's role gives it (docs/design.md, 'Roles')."""

    image: str
    cpu: float
    mem: int
    gpu: int
    #: what the kernel runs in a batch session (None: nothing; it waits)
    startup_command: str | None = None


def kernel_conf(plan: SessionPlan, hostname: str) -> str:
    writable = " ".join(f"/home/work/{name}" for name, (_, ro) in plan.mounts.items() if not ro)
    # a batch kernel with a command (main1's, a role's) starts it once the session is ready
    wait_go = 1 if plan.batch and plan.shape(hostname).startup_command else 0
    return (
        f"_troupe_uid={plan.uid}\n_troupe_gid={plan.gid}\n"
        f"_troupe_wait_go={wait_go}\n_troupe_chown='{writable}'\n"
        f"_troupe_ready_timeout={plan.ready_timeout}\n"
        # (also in the container's environment; a restart in place keeps that one: this
        # line, read at every start, gives every entry path the attempt's count)
        f"export {RESTART_COUNT_VAR}={plan.restarts}\n"
    )


def resource_txt(shape: KernelShape) -> str:
    """``/home/config/resource.txt``: the kernel's resources, Backend.AI-style slot names."""
    return f"cpu={shape.cpu:g}\nmem={shape.mem}\ncuda.device={shape.gpu}\n"


def authorized_keys(plan: SessionPlan, hostname: str) -> str:
    """The keys that open ``hostname``: the session's own, plus the user's in main1 only (sub
    kernels stay reachable only from inside the session, as Backend.AI's)."""
    keys = [plan.ssh_public_key]
    if hostname == "main1" and plan.user_ssh_key:
        keys.append(plan.user_ssh_key)
    return "".join(k + "\n" for k in keys)


def work_home(plan: SessionPlan, hosts: list[str], known_hosts: str) -> list[FileSpec]:
    """User ``work``'s home and SSH files, owned by the session's uid/gid and with their
    final modes: put into the container before it starts, so its entrypoint copies nothing."""
    own = {"uid": plan.uid, "gid": plan.gid}
    mine = {**own, "mode": 0o600}
    ssh = "/home/work/.ssh"
    return [
        FileSpec(path="/home/work", directory=True, mode=0o755, **own),
        FileSpec(path=ssh, directory=True, mode=0o700, **own),
        FileSpec(path=f"{ssh}/id_cluster", content=plan.ssh_private_key, **mine),
        FileSpec(path=f"{ssh}/id_cluster.pub", content=plan.ssh_public_key + "\n", **mine),
        FileSpec(path=AUTHORIZED_KEYS, content=plan.ssh_public_key + "\n", **mine),
        FileSpec(path=f"{ssh}/config", content=ssh_client_config_text(hosts), **mine),
        FileSpec(path=f"{ssh}/known_hosts", content=known_hosts, **mine),
        # empty: the entrypoint writes the session's variables into it (owner and mode stay)
        FileSpec(path=f"{ssh}/environment", content="", **mine),
    ]


def kernel_specs(
    plan: SessionPlan,
    contracts: list[KernelContract],
    host_keys: Mapping[str, tuple[str, str]],
    gpus: Mapping[str, list[str]] | None = None,
) -> list[KernelSpec]:
    """``host_keys``: hostname -> (private, public) sshd host key of that kernel; ``gpus``:
    hostname -> UUIDs of its GPUs (chosen when the session was placed)."""
    hosts = [c.hostname for c in contracts]
    known_hosts = known_hosts_text({h: host_keys[h][1] for h in hosts})
    # MPI's slots: a host's GPUs (one process each), 1 without GPUs
    hostfile = hostfile_text(hosts, [max(plan.shape(h).gpu, 1) for h in hosts])
    shared = [
        FileSpec(path=f"{CONFIG}/hostfile", content=hostfile),
        FileSpec(path=DEEPSPEED_HOSTFILE, content=hostfile),
        FileSpec(path=f"{CONFIG}/ssh/id_cluster", content=plan.ssh_private_key, mode=0o600),
        FileSpec(path=f"{CONFIG}/ssh/id_cluster.pub", content=plan.ssh_public_key + "\n"),
        FileSpec(path=f"{CONFIG}/ssh/authorized_keys", content=plan.ssh_public_key + "\n"),
        FileSpec(path=f"{CONFIG}/ssh/config", content=ssh_client_config_text(hosts)),
        FileSpec(path=f"{CONFIG}/ssh/known_hosts", content=known_hosts),
        FileSpec(
            path=f"{CONFIG}/ssh/sshd_config",
            content=sshd_config_text(HOST_KEY_IN_KERNEL, ".ssh/authorized_keys"),
        ),
        *work_home(plan, hosts, known_hosts),
        FileSpec(path="/run/troupe", directory=True, mode=0o755),
        # the entrypoint wakes ready.sh through it when the kernel is set up
        FileSpec(path="/run/troupe/events", fifo=True, mode=0o600),
        FileSpec(path="/run/sshd", directory=True, mode=0o755),
    ]
    mounts = [
        MountSpec(folder_id=folder_id, target=f"/home/work/{name}", readonly=ro)
        for name, (folder_id, ro) in plan.mounts.items()
    ]
    specs = []
    for c in contracts:
        private, public = host_keys[c.hostname]
        shape = plan.shape(c.hostname)
        files = [
            FileSpec(path=f"{CONFIG}/resource.txt", content=resource_txt(shape)),
            *(f for f in shared if f.path != AUTHORIZED_KEYS),
            FileSpec(
                path=AUTHORIZED_KEYS,
                content=authorized_keys(plan, c.hostname),
                uid=plan.uid,
                gid=plan.gid,
                mode=0o600,
            ),
            FileSpec(path=f"{CONFIG}/kernel.conf", content=kernel_conf(plan, c.hostname)),
            FileSpec(path=f"{CONFIG}/ssh/host_ed25519_key", content=private, mode=0o600),
            FileSpec(path=HOST_KEY_IN_KERNEL, content=private, mode=0o600),
            FileSpec(path=f"{CONFIG}/ssh/host_ed25519_key.pub", content=public + "\n"),
        ]
        command = (
            ["/bin/sh", "-c", shape.startup_command] if plan.batch and shape.startup_command else []
        )
        specs.append(
            KernelSpec(
                session_id=plan.session_id,
                kernel_id=c.kernel_id,
                owner=plan.owner,
                hostname=c.hostname,
                image=shape.image,
                network=plan.network,
                env={
                    **c.env,
                    GPUS_VAR: str(shape.gpu),
                    RESTART_COUNT_VAR: str(plan.restarts),
                    **({SUPERVISED_VAR: "1"} if plan.supervised else {}),
                },
                cpu=shape.cpu,
                mem=shape.mem,
                command=command,
                files=files,
                mounts=mounts,
                gpus=list((gpus or {}).get(c.hostname, [])),
            )
        )
    return specs


def session_kernel_specs(s: Session, ready_timeout: float = 300) -> list[KernelSpec]:
    """The kernel specs of a stored, placed session (its network already chosen); on a
    restart each kernel keeps the address it had."""
    assert s.network is not None
    layout: list[tuple[str, int]] = []
    for k in s.kernels:  # in rank order: each role's kernels one after another
        if layout and layout[-1][0] == k.role:
            layout[-1] = (k.role, layout[-1][1] + 1)
        else:
            layout.append((k.role, 1))
    contracts = build_cluster(
        s.id,
        [k.id for k in s.kernels],
        s.cluster_mode,
        s.environ,
        s.dist_env,
        layout=layout,
        role_environ={k.role: k.environ or {} for k in s.kernels},
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
        gpu=s.gpu,
        uid=s.uid,
        gid=s.gid,
        ssh_private_key=s.ssh_private_key,
        ssh_public_key=s.ssh_public_key,
        user_ssh_key=s.user_ssh_key,
        mounts={m["folder"]: (m["folder_id"], bool(m["readonly"])) for m in s.mounts},
        ready_timeout=max(1, int(ready_timeout)),
        restarts=s.restarts or 0,
        supervised=(s.max_restarts or 0) > 0,
        roles={
            k.hostname: KernelShape(k.image, k.cpu, k.mem, k.gpu, k.startup_command)
            for k in s.kernels
        },
    )
    keys = {k.hostname: (k.host_private_key, k.host_public_key) for k in s.kernels}
    gpus = {k.hostname: [str(g) for g in k.gpus or []] for k in s.kernels}
    specs = kernel_specs(plan, contracts, keys, gpus)
    if s.restarts:
        ips = {k.id: k.ip for k in s.kernels}
        specs = [spec.model_copy(update={"ip": ips.get(spec.kernel_id)}) for spec in specs]
    return specs
