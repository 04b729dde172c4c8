"""Pure cluster-session contract: hostnames, ranks, environment, SSH files and keys
(docs/contract.md, 'Environment in every kernel' and 'SSH between kernels')."""

from troupe.cluster.contract import (
    CLUSTER_ENV_NAMES,
    DEFAULT_MASTER_PORT,
    RESERVED_ENV_PREFIX,
    SSH_PORT,
    USER_SETTABLE_RESERVED,
    ClusterMode,
    DistEnvMode,
    KernelContract,
    Role,
    build_cluster,
    check_hostname,
    cluster_hostnames,
    hostfile_text,
    replicas_text,
    reserved_names,
)
from troupe.cluster.dist import derive_dist_env
from troupe.cluster.keys import SSHKeyPair, generate_ed25519
from troupe.cluster.ssh import known_hosts_text, ssh_client_config_text, sshd_config_text

__all__ = [
    "CLUSTER_ENV_NAMES",
    "DEFAULT_MASTER_PORT",
    "RESERVED_ENV_PREFIX",
    "SSH_PORT",
    "USER_SETTABLE_RESERVED",
    "ClusterMode",
    "DistEnvMode",
    "KernelContract",
    "Role",
    "SSHKeyPair",
    "build_cluster",
    "check_hostname",
    "cluster_hostnames",
    "derive_dist_env",
    "generate_ed25519",
    "hostfile_text",
    "known_hosts_text",
    "replicas_text",
    "reserved_names",
    "ssh_client_config_text",
    "sshd_config_text",
]
