"""Text of every kernel's SSH files (docs/contract.md, 'SSH between kernels'): client config,
known_hosts, sshd config.

Host keys are pinned (StrictHostKeyChecking yes) instead of switched off, so `ssh sub1` works
without prompts or warnings and still refuses a host it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from troupe.cluster.contract import SSH_PORT, check_hostname


def _plain(value: str, what: str) -> str:
    """Reject whitespace and control characters: config values are unquoted, one per line."""
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"invalid {what}: {value!r}")
    return value


def ssh_client_config_text(
    hosts: Sequence[str],
    user: str = "work",
    identity_file: str = "~/.ssh/id_cluster",
    known_hosts_file: str = "~/.ssh/known_hosts",
) -> str:
    """`~/.ssh/config` for `work`: the session's hosts only, on port 2200, with pinned host keys."""
    if not hosts:
        raise ValueError("at least one host is needed")
    names = " ".join(check_hostname(h) for h in hosts)
    lines = [
        f"Host {names}",
        f"    Port {SSH_PORT}",
        f"    User {_plain(user, 'user')}",
        f"    IdentityFile {_plain(identity_file, 'identity file')}",
        "    IdentitiesOnly yes",
        "    StrictHostKeyChecking yes",
        f"    UserKnownHostsFile {_plain(known_hosts_file, 'known_hosts file')}",
        "    LogLevel ERROR",
        "    BatchMode yes",
        "    ConnectTimeout 10",
        "    ServerAliveInterval 30",
    ]
    return "\n".join(lines) + "\n"


def known_hosts_text(host_keys: Mapping[str, str]) -> str:
    """known_hosts lines `[host]:2200 TYPE BASE64`, in the mapping's order; key comments dropped."""
    lines = []
    for host, key_line in host_keys.items():
        fields = key_line.split()
        if len(fields) < 2:
            raise ValueError(f"invalid public key for {host!r}: {key_line!r}")
        key_type, key_b64 = fields[0], fields[1]
        lines.append(f"[{check_hostname(host)}]:{SSH_PORT} {key_type} {key_b64}\n")
    return "".join(lines)


def sshd_config_text(
    host_key_path: str,
    authorized_keys_file: str,
    port: int = SSH_PORT,
    user: str = "work",
) -> str:
    """Self-contained config for `sshd -f`: key-only logins for `user`, no root, no passwords."""
    if not 1 <= port <= 65535:
        raise ValueError(f"invalid port: {port}")
    lines = [
        f"Port {port}",
        "ListenAddress 0.0.0.0",
        f"HostKey {_plain(host_key_path, 'host key path')}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin no",
        "PubkeyAuthentication yes",
        f"AuthorizedKeysFile {_plain(authorized_keys_file, 'authorized_keys file')}",
        f"AllowUsers {_plain(user, 'user')}",
        "UseDNS no",
        # Lets ~/.ssh/environment carry the session variables into SSH logins
        # (docs/contract.md, 'Environment in every kernel').
        "PermitUserEnvironment yes",
        "UsePAM no",
        "PrintMotd no",
        # Many peers may connect at once when a job starts on every kernel.
        "MaxStartups 100:30:200",
        # Home directories and data folders may be owned by a uid that sshd would refuse.
        "StrictModes no",
        "Subsystem sftp internal-sftp",
        "PidFile /run/sshd-troupe.pid",
    ]
    return "\n".join(lines) + "\n"
