"""Every default that more than one side uses, defined once (ports, paths, pools, time-outs).

Plain constants and path helpers: importing this module costs nothing, so the CLI may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The manager's REST API.
HOST = "127.0.0.1"
PORT = 8090
API_URL = f"http://{HOST}:{PORT}"

#: Agents on other hosts: where they listen and how often they report.
AGENT_LISTEN = "127.0.0.1:6011"
AGENT_DATA_ROOT = Path("/var/lib/troupe")
HEARTBEAT_SECONDS = 2.0
#: An agent silent this long is LOST and its sessions fail.
AGENT_TIMEOUT_SECONDS = 15.0

#: Session networks get /24 subnets out of this pool.
SUBNET_POOL = "10.88.0.0/16"
SUBNET_PREFIX = 24
#: Time a session may take from SCHEDULED to RUNNING before it fails.
CREATE_TIMEOUT_SECONDS = 120.0
MAX_CLUSTER_SIZE = 64

#: Hardening limits (docs/reliability.md).
MAX_BODY_BYTES = 1024**2
SAVED_LOG_BYTES = 8 * 1024**2
#: All saved logs together (oldest sessions' deleted first), and the free space on the data
#: disk below which new sessions are refused.
SAVED_LOGS_TOTAL = 4 * 1024**3
MIN_FREE_DISK = 1024**3
RETENTION_DAYS = 30.0
QUOTA_SESSIONS = 50
QUOTA_KERNELS = 256
QUOTA_STREAMS = 32
#: Kernel containers: processes and open files.
PIDS_LIMIT = 4096
NOFILE = 65536
#: Engine log files of one kernel: json-file max-size and max-file.
ENGINE_LOG_MAX_SIZE = "10m"
ENGINE_LOG_MAX_FILES = 3
#: Smallest resources a kernel may ask for.
MIN_CPU = 0.01
MIN_MEM = 16 * 1024**2

#: The resource group of agents and sessions that name none.
GROUP = "default"

#: Per-kernel resources when a request names none.
CPU = 0.5
MEM = 512 * 1024**2


def data_dir() -> Path:
    """The manager's database, folders and saved logs (XDG data home)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "troupe"


def config_dir() -> Path:
    """Credentials and the agent token: ``TROUPE_CONFIG_DIR``, else the XDG config home."""
    if "TROUPE_CONFIG_DIR" in os.environ:
        return Path(os.environ["TROUPE_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "troupe"


def credentials_file() -> Path:
    """Where the server writes the admin's API key and clients read it (mode 0600)."""
    return config_dir() / "credentials.json"


def agent_token_file() -> Path:
    return config_dir() / "agent-token"


#: Seconds of quiet after which a followed log stream (server-sent events) sends a comment.
KEEPALIVE_SECONDS = 15.0
