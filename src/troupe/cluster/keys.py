"""Per-session SSH key pairs (SPEC section 6), made in memory; writing them is the caller's job."""

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
