"""A stand-in agent: the AgentBackend protocol in memory, with controllable delays and
injectable failures, so the manager's logic is tested without a Docker engine."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from troupe.api.agent import (
    AgentCapacity,
    ExitHandler,
    KernelExit,
    KernelRestarted,
    KernelSpec,
    KernelStarted,
    KernelState,
    NetworkSpec,
    ReadyTimes,
)
from troupe.api.errors import AgentFailed, NotFound, TroupeError
from troupe.api.exec import ExecExit, ExecItem, ExecOutput
from troupe.api.metrics import AgentMetrics, HostSample, KernelSample, KernelSamples
from troupe.api.models import GpuInfo, ImageInfo
from troupe.api.pipe import RUNNER_DIR
from troupe.api.registries import PullProgress, PullRequest

_ids = itertools.count(1)


@dataclass
class FakeContainer:
    spec: KernelSpec
    id: str
    ip: str
    state: str = "running"
    logs: list[str] = field(default_factory=list)


class FakeShell:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def read(self) -> bytes | None:
        return await self._out.get()

    async def write(self, data: bytes) -> None:
        self.sent.append(data)
        await self._out.put(b"echo:" + data)
        if data.strip() == b"exit":
            await self._out.put(None)

    async def resize(self, rows: int, cols: int) -> None:
        pass

    async def exit_code(self) -> int:
        return 0


class FakePipe:
    """Echoes its input back until the input ends; remembers the command it was opened with."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def read(self) -> tuple[int, bytes] | None:
        data = await self._out.get()
        return None if data is None else (1, data)

    async def write(self, data: bytes) -> None:
        await self._out.put(data)

    async def close_input(self) -> None:
        await self._out.put(None)

    async def exit_code(self) -> int:
        return 0


@dataclass
class FakeApps:
    """main1's apps as the runner's ``app.sh`` would report them (one set per agent: tests
    use one session at a time). ``serving``: ports that answer; ``behaviour``: what starting
    app NAME does (``serve`` its port, ``exit`` with code 1 after two log lines, ``hang``
    until the time-out); every start is recorded in ``started``."""

    serving: set[int] = field(default_factory=set)
    behaviour: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    #: app name -> "exit:N" / "timeout" once it ended
    ended: dict[str, str] = field(default_factory=dict)
    logs: dict[str, list[str]] = field(default_factory=dict)
    #: set to an Event: a start waits for it before it reports (None: it does not)
    start_gate: asyncio.Event | None = None

    def report(self, name: str, port: int) -> list[str]:
        if port in self.serving:
            return [f"app {name} running "]
        end = self.ended.get(name)
        if end is None:
            state = "stopped "
        elif end == "timeout":
            state = f"failed did not answer on port {port} in time and was stopped"
        else:
            state = f"failed exited with code {end.removeprefix('exit:')}"
        return [f"app {name} {state}", *(f"log {name} {x}" for x in self.logs.get(name, []))]

    async def run(self, args: list[str]) -> tuple[int, str]:
        self.commands.append(args)
        if args[0] == "status":
            apps = [a.rpartition(":") for a in args[2:]]
            return 0, "".join(line + "\n" for n, _, p in apps for line in self.report(n, int(p)))
        name, port, command = args[2], int(args[3]), args[5]
        if port not in self.serving:
            self.started.append(name)
            self.logs[name] = [f"troupe: starting {name}: {command}"]
            if self.start_gate is not None:
                await self.start_gate.wait()
            what = self.behaviour.get(name, "serve")
            if what == "serve":
                self.serving.add(port)
                self.ended.pop(name, None)
            elif what == "exit":
                self.logs[name] += [f"{name}: cannot start", f"troupe: {name} exited with code 1"]
                self.ended[name] = "exit:1"
            else:
                self.logs[name].append(f"troupe: {name} did not answer on port {port}: stopped")
                self.ended[name] = "timeout"
        return (0 if port in self.serving else 1), "".join(
            line + "\n" for line in self.report(name, port)
        )


class FakeAgent:
    def __init__(
        self,
        name: str,
        cpu: float = 4,
        mem: int = 8 * 1024**3,
        group: str = "default",
        images: Sequence[str] = ("troupe/base:0.1.0",),
        swarm_manager: bool = False,
        address: str = "",
        gpus: int = 0,
    ) -> None:
        self.name = name
        self.address = address
        self.cap = AgentCapacity(
            name=name,
            cpu=cpu,
            mem=mem,
            group=group,
            swarm_manager=swarm_manager,
            data_marker="shared",
            underlay_mtu=1500,
            gpu=gpus,
            gpus=[
                GpuInfo(index=i, uuid=f"GPU-{name}-{i}", model="Fake GPU", memory=16 * 1024**3)
                for i in range(gpus)
            ],
            gpu_reason="" if gpus else "nvidia-smi not found on PATH",
        )
        self.image_names = set(images)
        self.networks: dict[str, NetworkSpec] = {}
        self.containers: dict[str, FakeContainer] = {}
        self.pipes: list[FakePipe] = []
        self.on_exit: ExitHandler | None = None
        #: method name (or "create_kernel:<hostname>") -> seconds to sleep first
        self.delays: dict[str, float] = {}
        #: same keys -> error raised (after the delay)
        self.failures: dict[str, TroupeError] = {}
        #: cleared: wait_ready blocks until it is set again (or the time-out)
        self.ready_gate = asyncio.Event()
        self.ready_gate.set()
        #: an agent whose engine is gone: every call fails
        self.down = False
        self.closed = False
        self.calls: list[str] = []
        self.exec_output = b"hello\n"
        self.exec_code = 0
        #: set to an Event: followed logs (follow=True) stay open after their lines until it
        #: is set (None: they end at once, as before)
        self.follow_gate: asyncio.Event | None = None
        #: followed log streams open right now
        self.following = 0
        #: set to an Event: exec_stream waits for it before its output (None: it does not)
        self.exec_gate: asyncio.Event | None = None
        #: image name -> its labels (image_labels answers {} for others)
        self.labels: dict[str, dict[str, str]] = {}
        #: the apps of main1 (exec of the runner's app.sh)
        self.apps = FakeApps()
        #: samples :meth:`metrics` answers: (session id, hostname) -> samples (:meth:`sample`)
        self.samples: dict[tuple[str, str], list[KernelSample]] = {}
        self.metrics_interval = 5.0
        #: images a pull finds in their registry: name -> size in bytes
        self.pullable: dict[str, int] = {}
        #: every image is in its registry (1 byte) unless ``pullable`` says otherwise
        self.pull_any = False
        #: every pull request received (credentials included: what the manager sent)
        self.pulls: list[PullRequest] = []
        #: set to an Event: a pull stops half-way until it is set (None: it does not)
        self.pull_gate: asyncio.Event | None = None

    async def _step(self, key: str) -> None:
        self.calls.append(key)
        if self.down:
            raise AgentFailed(f"agent {self.name} unreachable")
        if key in self.delays:
            await asyncio.sleep(self.delays[key])
        if key in self.failures:
            raise self.failures[key]

    # -- the protocol --------------------------------------------------------------
    async def start(self, on_exit: ExitHandler | None = None) -> None:
        self.on_exit = on_exit

    async def close(self) -> None:
        self.closed = True

    async def capacity(self) -> AgentCapacity:
        await self._step("capacity")
        return self.cap

    async def images(self) -> list[ImageInfo]:
        await self._step("images")
        return [ImageInfo(name=n, id=n, size=1, created="") for n in sorted(self.image_names)]

    async def has_image(self, name: str) -> bool:
        await self._step("has_image")
        return name in self.image_names

    async def image_labels(self, name: str) -> dict[str, str]:
        await self._step("image_labels")
        if name not in self.image_names:
            raise AgentFailed(f"inspecting image {name}: no such image")
        return dict(self.labels.get(name, {}))

    async def pull_image(self, req: PullRequest) -> AsyncIterator[PullProgress]:
        await self._step("pull_image")
        self.pulls.append(req)
        size = self.pullable.get(req.image, 1 if self.pull_any else None)
        if size is None:
            raise AgentFailed(
                f"pulling {req.image} on agent {self.name}: unknown image", field="image"
            )
        yield PullProgress(agent=self.name, image=req.image, done_bytes=0, total_bytes=size)
        yield PullProgress(agent=self.name, image=req.image, done_bytes=size // 2, total_bytes=size)
        if self.pull_gate is not None:
            await self.pull_gate.wait()
        self.image_names.add(req.image)
        yield PullProgress(
            agent=self.name, image=req.image, done_bytes=size, total_bytes=size, done=True
        )

    async def used_subnets(self) -> list[str]:
        await self._step("used_subnets")
        return [n.subnet for n in self.networks.values()]

    async def create_network(self, spec: NetworkSpec) -> None:
        await self._step("create_network")
        self.networks[spec.name] = spec

    async def remove_session_networks(self, session_id: str) -> None:
        await self._step("remove_session_networks")
        for name in [n for n, s in self.networks.items() if s.session_id == session_id]:
            del self.networks[name]

    async def create_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelStarted]:
        await self._step("create_kernels")

        async def one(spec: KernelSpec) -> KernelStarted:
            await self._step(f"create_kernel:{spec.hostname}")
            n = next(_ids)
            c = FakeContainer(spec, f"c{n:06d}", f"10.0.{n // 250}.{n % 250 + 2}")
            c.logs.append(f"2026-11-26T00:00:{n % 60:02d}.000Z {spec.hostname} started\n")
            self.containers[c.id] = c
            now = datetime.now(UTC).isoformat()
            return KernelStarted(
                kernel_id=spec.kernel_id,
                container_id=c.id,
                ip=c.ip,
                created_at=now,
                started_at=now,
            )

        results = await asyncio.gather(*(one(s) for s in specs), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return [r for r in results if isinstance(r, KernelStarted)]

    async def restart_kernels(self, specs: Sequence[KernelSpec]) -> list[KernelRestarted]:
        """Each kernel's container started again (the same id, its log going on), with the
        new spec; one that is gone is made anew, as the real agent does."""
        await self._step("restart_kernels")
        out = []
        for spec in specs:
            await self._step(f"restart_kernel:{spec.hostname}")
            c = next(
                (
                    c
                    for c in self.containers.values()
                    if c.spec.container_name == spec.container_name
                ),
                None,
            )
            if c is None:
                [fresh] = await self.create_kernels([spec])
                out.append(KernelRestarted(**fresh.model_dump(), recreated=True))
                continue
            log = "".join(c.logs)
            now = datetime.now(UTC)
            c.spec, c.state = spec, "running"
            stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "999Z"
            c.logs.append(f"{stamp} {spec.hostname} started\n")
            out.append(
                KernelRestarted(
                    kernel_id=spec.kernel_id,
                    container_id=c.id,
                    ip=c.ip,
                    created_at=now.isoformat(),
                    started_at=now.isoformat(),
                    log=log,
                )
            )
        return out

    async def wait_ready(
        self, containers: dict[str, str], hosts: list[str], timeout: float
    ) -> dict[str, ReadyTimes]:
        await self._step("wait_ready")
        try:
            async with asyncio.timeout(timeout):
                await self.ready_gate.wait()
        except TimeoutError:
            raise AgentFailed("kernels did not become ready", kernel=hosts[0]) from None
        now = datetime.now(UTC).isoformat()
        return {h: {"entrypoint": now, "ready": now} for h in containers}

    async def signal_go(self, container_id: str) -> None:
        await self._step("signal_go")

    async def remove_kernels(self, session_id: str) -> dict[str, str]:
        await self._step("remove_kernels")
        logs = {}
        for cid in [c for c, k in self.containers.items() if k.spec.session_id == session_id]:
            c = self.containers.pop(cid)
            logs[c.spec.hostname] = "".join(c.logs)
        return logs

    async def list_kernels(self) -> list[KernelState]:
        await self._step("list_kernels")
        return [
            KernelState(
                session_id=c.spec.session_id,
                kernel_id=c.spec.kernel_id,
                hostname=c.spec.hostname,
                container_id=c.id,
                state=c.state,
                gpus=c.spec.gpus,
            )
            for c in self.containers.values()
        ]

    async def list_session_ids_with_networks(self) -> set[str]:
        await self._step("list_networks")
        return {n.session_id for n in self.networks.values()}

    async def metrics(self, since: float | None = None) -> AgentMetrics:
        await self._step("metrics")
        kernels, host = [], {}
        for (sid, hostname), samples in self.samples.items():
            new = [s for s in samples if since is None or s.t > since]
            if new:
                kernels.append(KernelSamples(session_id=sid, hostname=hostname, samples=new))
            for s in new:
                h = host.setdefault(s.t, HostSample(t=s.t))
                h.cpu_cores += s.cpu_cores
                h.mem_bytes += s.mem_bytes
                h.kernels += 1
                h.gpus += s.gpus
        return AgentMetrics(
            interval=self.metrics_interval,
            kernels=kernels,
            host=[host[t] for t in sorted(host)],
        )

    async def logs(self, container_id: str, follow: bool = False) -> AsyncIterator[str]:
        c = self.containers.get(container_id)
        if c is None:
            raise NotFound.of("container", container_id)
        for line in list(c.logs):
            yield line
        if follow and self.follow_gate is not None:
            self.following += 1
            try:
                await self.follow_gate.wait()
            finally:
                self.following -= 1

    async def exec_stream(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[ExecItem]:
        await self._step("exec")
        if container_id not in self.containers:
            raise NotFound.of("container", container_id)
        if self.exec_gate is not None:
            await self.exec_gate.wait()
        if command[:2] == ["/bin/sh", f"{RUNNER_DIR}/app.sh"]:
            code, out = await self.apps.run(command[2:])
            yield ExecOutput(out.encode())
            yield ExecExit(code)
            return
        yield ExecOutput(self.exec_output)
        yield ExecExit(self.exec_code)

    @contextlib.asynccontextmanager
    async def shell(self, container_id: str, user: str = "work") -> AsyncIterator[FakeShell]:
        yield FakeShell()

    @contextlib.asynccontextmanager
    async def pipe(
        self, container_id: str, command: list[str], user: str = "work"
    ) -> AsyncIterator[FakePipe]:
        if container_id not in self.containers:
            raise NotFound.of("container", container_id)
        self.pipes.append(p := FakePipe(command))
        yield p

    # -- test controls ---------------------------------------------------------------
    def container(self, session_id: str, hostname: str) -> FakeContainer:
        return next(
            c
            for c in self.containers.values()
            if c.spec.session_id == session_id and c.spec.hostname == hostname
        )

    def session_ids(self) -> set[str]:
        ids = {c.spec.session_id for c in self.containers.values()}
        return ids | {n.session_id for n in self.networks.values()}

    async def exit_kernel(
        self, session_id: str, hostname: str, code: int = 1, oom: bool = False
    ) -> None:
        """The container stops on its own: the agent reports it like Docker's event."""
        c = self.container(session_id, hostname)
        c.state = "exited"
        assert self.on_exit is not None, "this agent reports exits through the manager's API"
        await self.on_exit(
            KernelExit(
                session_id=session_id,
                kernel_id=c.spec.kernel_id,
                exit_code=code,
                oom_killed=oom,
                last_logs=[f"{hostname} says goodbye"],
            )
        )

    def sample(self, session_id: str, hostname: str, **fields: object) -> KernelSample:
        """Adds a sample of a kernel (``t``: now unless given; the other figures: 0 unless
        given) for :meth:`metrics` to answer."""
        base: dict[str, object] = {
            "t": datetime.now(UTC).timestamp(),
            "cpu_cores": 0.0,
            "mem_bytes": 0,
        }
        s = KernelSample.model_validate({**base, **fields})
        self.samples.setdefault((session_id, hostname), []).append(s)
        return s
