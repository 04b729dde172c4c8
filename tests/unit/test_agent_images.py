"""``ImageInfo.has_sshd``: filled in from image labels (it was always None before)."""

from __future__ import annotations

import re
from pathlib import Path

from troupe.agent.images import LABEL_IMAGE, has_sshd, image_infos

ROOT = Path(__file__).resolve().parents[2]


def test_has_sshd_comes_from_the_images_labels() -> None:
    engine_list = [
        {"Id": "sha256:1", "RepoTags": ["troupe/base:0.1.0"], "Labels": {"troupe.image": "base"}},
        {"Id": "sha256:2", "RepoTags": ["mine:with"], "Labels": {"troupe.sshd": "true"}},
        {"Id": "sha256:3", "RepoTags": ["mine:without"], "Labels": {"troupe.sshd": "false"}},
        {"Id": "sha256:4", "RepoTags": ["alpine:3"], "Labels": None},
        {"Id": "sha256:5", "RepoTags": ["<none>:<none>"]},
    ]
    got = {i.name: i.has_sshd for i in image_infos(engine_list)}
    assert got == {
        "alpine:3": None,  # not known: troupe does not look inside images
        "mine:with": True,
        "mine:without": False,
        "troupe/base:0.1.0": True,
    }
    assert has_sshd({"troupe.image": "x", "troupe.sshd": "no"}) is False  # its own word wins


def test_every_troupe_image_recipe_has_sshd() -> None:
    """What ``has_sshd`` assumes of the label ``troupe.image``: every recipe sets it and has
    sshd (the base installs openssh-server; the others are built on the base)."""
    packages = (ROOT / "images/base/packages.txt").read_text().split()
    assert "openssh-server" in packages
    for recipe in sorted((ROOT / "images").glob("*/Dockerfile")):
        text = recipe.read_text()
        assert re.search(rf"^LABEL {re.escape(LABEL_IMAGE)}=", text, re.M), recipe
        if recipe.parent.name != "base":
            assert re.search(r"^FROM \$\{BASE\}$", text, re.M), recipe
