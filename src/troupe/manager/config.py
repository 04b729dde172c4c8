"""Manager settings: command-line flags over environment over defaults."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "troupe"


def default_config_dir() -> Path:
    if "TROUPE_CONFIG_DIR" in os.environ:
        return Path(os.environ["TROUPE_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "troupe"


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8090
    data_dir: Path = field(default_factory=default_data_dir)
    config_dir: Path = field(default_factory=default_config_dir)
    db_url: str | None = None
    local_agent: bool = True
    #: Capacity the local agent offers (default: the whole host).
    agent_cpu: float | None = None
    agent_mem: int | None = None
    max_cluster_size: int = 64
    #: Session networks get /24 subnets out of this pool.
    subnet_pool: str = "10.88.0.0/16"
    subnet_prefix: int = 24
    #: Time a session may take from SCHEDULED to RUNNING before it fails.
    create_timeout: float = 120.0
    docker_url: str | None = None
    #: Shared secret of manager and agents (default: generated once, kept in the config dir).
    agent_token: str | None = None
    #: An agent silent this long is LOST and its sessions fail.
    agent_timeout: float = 15.0

    def __post_init__(self) -> None:
        ipaddress.ip_network(self.subnet_pool)

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
            import os
            import secrets

            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        self.agent_token = path.read_text().strip()
        return self.agent_token
