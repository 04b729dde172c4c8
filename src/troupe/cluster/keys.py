"""Per-session SSH key pairs (docs/contract.md, 'SSH between kernels'), made in memory; writing
them is the caller's job."""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@dataclass(frozen=True, repr=False)
class SSHKeyPair:
    """An OpenSSH key pair; its repr omits the private key so it can never end up in a log."""

    private_openssh: str
    public_openssh: str

    def __repr__(self) -> str:
        return f"SSHKeyPair(public_openssh={self.public_openssh!r}, private_openssh=<redacted>)"


def generate_ed25519(comment: str = "") -> SSHKeyPair:
    """A fresh ed25519 pair: unencrypted OpenSSH private key, `ssh-ed25519 AAAA... comment` line."""
    if any(c in comment for c in "\r\n\0"):
        raise ValueError("the key comment must be a single line")
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode("ascii")
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode("ascii")
    )
    if comment:
        public = f"{public} {comment}"
    return SSHKeyPair(private_openssh=private, public_openssh=public)


#: Public key types a user may add to main1 (what OpenSSH accepts by default).
USER_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "ssh-rsa",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)


def check_public_key(line: str) -> str:
    """One OpenSSH public key line (``TYPE BASE64 [comment]``), checked so that it can go into
    an ``authorized_keys`` file as it is: one line, no options, a known type whose key data
    decodes. Returns it with surrounding blanks removed; raises ValueError saying why not."""
    import base64
    import binascii

    line = line.strip()
    if not line or any(c in line for c in "\r\n\0"):
        raise ValueError("must be one line: TYPE BASE64 [comment]")
    if len(line) > 16384:
        raise ValueError("too long for a public key")
    fields = line.split(None, 2)
    if len(fields) < 2 or fields[0] not in USER_KEY_TYPES:
        raise ValueError(
            "not an OpenSSH public key (TYPE BASE64 [comment], TYPE one of "
            + ", ".join(sorted(USER_KEY_TYPES))
            + "); give the .pub file, never the private key"
        )
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key data is not base64") from None
    # The blob starts with the key type as an SSH string: a mismatch means a damaged key.
    n = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    if blob[4 : 4 + n].decode("ascii", "replace") != fields[0]:
        raise ValueError(f"the key data is not a {fields[0]} key")
    if fields[0] in ("ssh-ed25519", "ssh-rsa") or fields[0].startswith("ecdsa-"):
        from cryptography.hazmat.primitives.serialization import load_ssh_public_key

        try:
            load_ssh_public_key(f"{fields[0]} {fields[1]}".encode())
        except (ValueError, TypeError):
            raise ValueError(f"the key data is not a valid {fields[0]} key") from None
    return line
