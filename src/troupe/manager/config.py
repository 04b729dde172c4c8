"""Manager settings: command-line flags over environment over the shared defaults."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from troupe.api import defaults

#: One DNS label (``--app-domain`` is labels joined by dots, then an optional ``:port``).
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
APP_DOMAIN = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}(?::[0-9]{{1,5}})?")


@dataclass
class ServerConfig:
    host: str = defaults.HOST
    port: int = defaults.PORT
    data_dir: Path = field(default_factory=defaults.data_dir)
    config_dir: Path = field(default_factory=defaults.config_dir)
    db_url: str | None = None
    local_agent: bool = True
    #: Capacity the local agent offers (default: the whole host).
    agent_cpu: float | None = None
    agent_mem: int | None = None
    #: The local agent's GPUs: auto, none or indices such as 0,2; and its nvidia-smi.
    agent_gpus: str = "auto"
    nvidia_smi: str | None = None
    max_cluster_size: int = defaults.MAX_CLUSTER_SIZE
    subnet_pool: str = defaults.SUBNET_POOL
    subnet_prefix: int = defaults.SUBNET_PREFIX
    create_timeout: float = defaults.CREATE_TIMEOUT_SECONDS
    #: Limit of one image pull on one agent (not counted in ``create_timeout``).
    pull_timeout: float = 1800.0
    #: Registries images may come from (``host[:port]``, ``docker.io``); empty: any.
    allowed_registries: list[str] = field(default_factory=list)
    docker_url: str | None = None
    #: Shared secret of manager and agents (default: generated once, kept in the config dir).
    agent_token: str | None = None
    agent_timeout: float = defaults.AGENT_TIMEOUT_SECONDS
    #: Seconds between orphan sweeps (containers and networks of finished sessions).
    sweep_interval: float = 60.0

    # -- limits (docs/reliability.md) ------------------------------------------------------
    #: Largest request body accepted (bytes); larger ones get 413.
    max_body_bytes: int = defaults.MAX_BODY_BYTES
    #: Saved log of one kernel: only its last this many bytes are kept.
    saved_log_bytes: int = defaults.SAVED_LOG_BYTES
    #: All saved logs together: oldest sessions' deleted first past this (0: no cap).
    saved_logs_total: int = defaults.SAVED_LOGS_TOTAL
    #: New sessions are refused (507) while the data dir's disk has less free (0: no check).
    min_free_disk: int = defaults.MIN_FREE_DISK
    #: Finished sessions (and their saved logs) are deleted after this many days; 0 keeps them.
    retention_days: float = defaults.RETENTION_DAYS
    #: Default per-user limits (admins may set others per user; admins have none).
    quota_sessions: int = defaults.QUOTA_SESSIONS
    quota_kernels: int = defaults.QUOTA_KERNELS
    quota_cpu: float | None = None
    quota_mem: int | None = None
    quota_gpu: int | None = None
    #: Processes per kernel container (the local agent's; remote agents have --pids-limit).
    pids_limit: int = defaults.PIDS_LIMIT
    #: CA bundle to verify agents that serve HTTPS (``troupe agent --tls-cert``).
    agent_ca_file: Path | None = None
    #: Concurrent long requests (wait, logs --follow, exec, terminals) of one user.
    quota_streams: int = defaults.QUOTA_STREAMS
    #: A followed log stream (as events) that is quiet this long sends a keep-alive comment.
    keepalive_seconds: float = defaults.KEEPALIVE_SECONDS
    #: File holding the token Prometheus scrapes ``/metrics`` with (besides an admin's key).
    metrics_token_file: Path | None = None

    # -- session clocks (docs/policies.md) --------------------------------------------------
    #: Seconds a session may run when it asks for no time limit (None: none).
    default_time_limit: int | None = None
    #: Idle seconds before an interactive session that asks for no idle timeout is destroyed.
    default_idle_timeout: int | None = None
    #: Default per-user maxima of the two (admins may set others per user).
    quota_time_limit: int | None = None
    quota_idle_timeout: int | None = None
    #: A kernel is quiet below this many cores (5% of one) and this GPU utilisation (%).
    idle_cpu: float = 0.05
    idle_gpu: float = 5.0
    #: Seconds between two checks of the reaper (time limits and idle sessions), at most.
    reap_interval: float = 5.0

    # -- apps in main1 (docs/apps.md) ------------------------------------------------------
    #: Apps are served from ``<port>-<session id>.<app_domain>``: a host name and an optional
    #: port, e.g. ``apps.example.com`` (DNS: a wildcard record). None: ``apps.localhost`` on
    #: the server's own port (browsers resolve ``*.localhost`` to this machine); "": no apps.
    app_domain: str | None = None
    #: App links use https (a TLS proxy with a wildcard certificate is in front).
    app_https: bool = False

    def __post_init__(self) -> None:
        ipaddress.ip_network(self.subnet_pool)
        if self.app_domain is None:
            self.app_domain = f"apps.localhost:{self.port}"
        self.app_domain = self.app_domain.strip().lower().rstrip(".")
        if self.app_domain and not APP_DOMAIN.fullmatch(self.app_domain):
            raise ValueError(
                f"invalid app domain {self.app_domain!r}: a host name (letters, digits, - and"
                " dots) and an optional :port, e.g. apps.example.com or apps.localhost:8090"
            )

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite+aiosqlite:///{self.data_dir / 'troupe.db'}"

    @property
    def folders_dir(self) -> Path:
        return self.data_dir / "folders"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def registries_file(self) -> Path:
        """The configured registries with their secrets (mode 0600)."""
        return self.data_dir / "registries.json"

    @property
    def credentials_file(self) -> Path:
        return self.config_dir / "credentials.json"

    @property
    def agent_token_file(self) -> Path:
        return self.config_dir / "agent-token"

    def resolve_agent_token(self) -> str:
        """The agent token: given, else read from or generated into the config dir (0600)."""
        if self.agent_token:
            return self.agent_token
        path = self.agent_token_file
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        self.agent_token = path.read_text().strip()
        return self.agent_token
