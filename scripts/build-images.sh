#!/usr/bin/env bash
# Builds troupe's kernel images offline (no registry) and caches them:
#   troupe/base:<version>     debootstrap bookworm minbase + images/base/packages.txt
#   troupe/pytorch:<version>  base + PyTorch CPU, numpy, JupyterLab, TensorBoard in /opt/venv
#                             (wheels from pip's local config; its apps are declared as labels)
#   troupe/mpi:<version>      base + Open MPI (Debian) + mpi4py and numpy in /opt/venv (same wheels)
#   runtime                   not an image: the kernel runtime every kernel mounts (OpenSSH and
#                             busybox, from the same root filesystem; scripts/build-runtime.sh)
# Each image is labelled troupe.recipe=<hash of its recipe files>; an image whose label
# matches is kept as it is. The debootstrap root filesystem is cached as a tarball, and
# imported as troupe/rootfs:<hash of its package list>, the FROM of troupe/base.
# Usage: build-images.sh [base|pytorch|mpi|runtime ...]   (default: all)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/common.sh
. "$ROOT/scripts/common.sh"

hash_files() { cat "$@" | sha256sum | cut -c1-16; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }
# Indents a long step's output so it reads as progress under its heading.
progress() { sed -u 's/^/    /'; }
# Keeps the lines of a long step that show how far it got (never fails the pipeline itself).
only() { grep --line-buffered -E "$1" || true; }

BASE_RECIPE=$(hash_files "$ROOT/images/base/packages.txt" "$ROOT/images/base/Dockerfile")
ROOTFS_KEY=$(hash_files "$ROOT/images/base/packages.txt")
PYTORCH_RECIPE=$(echo "$BASE_RECIPE" | cat - "$ROOT/images/pytorch/Dockerfile" "$ROOT/images/pytorch/requirements.txt" | sha256sum | cut -c1-16)
MPI_RECIPE=$(echo "$BASE_RECIPE" | cat - "$ROOT/images/mpi/Dockerfile" "$ROOT/images/mpi/requirements.txt" | sha256sum | cut -c1-16)

build_rootfs_tar() {
  local tar="$CACHE_DIR/rootfs-$ROOTFS_KEY.tar"
  if [ -s "$tar" ]; then echo "$tar"; return; fi
  mkdir -p "$CACHE_DIR"
  local dir; dir=$(mktemp -d /var/tmp/troupe-rootfs.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$dir'" RETURN
  local mirror pkgs t0; mirror=$(debian_mirror); t0=$(date +%s)
  pkgs=$(grep -v '^\s*#' "$ROOT/images/base/packages.txt" | xargs | tr ' ' ',')
  echo "==> debootstrap bookworm minbase (+$pkgs) — about a minute" >&2
  debootstrap --variant=minbase --include="$pkgs" bookworm "$dir" "$mirror" 2>&1 \
    | only '^I: (Retriev|Validat|Extract|Install|Configur|Base)' | progress >&2
  chroot "$dir" apt-get clean
  # No shared SSH host keys: troupe generates them per kernel.
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/etc/ssh/ssh_host_* "$dir"/var/cache/apt/*.bin
  mkdir -p "$dir/run/sshd"
  : > "$dir/etc/resolv.conf"
  tar --numeric-owner -C "$dir" -cf "$tar.tmp" .
  mv "$tar.tmp" "$tar"
  echo "    root filesystem ready in $(elapsed "$t0")" >&2
  echo "$tar"
}

BASE_CHECKED=0
build_base() {
  [ "$BASE_CHECKED" = 1 ] && return
  BASE_CHECKED=1
  local tag="troupe/base:$TROUPE_VERSION"
  if [ "$(image_recipe "$tag")" = "$BASE_RECIPE" ]; then echo "==> $tag is up to date"; return; fi
  local tar t0 old rootfs="troupe/rootfs:$ROOTFS_KEY"
  old=$("$DOCKER" image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  tar=$(build_rootfs_tar); t0=$(date +%s)
  if ! "$DOCKER" image inspect "$rootfs" >/dev/null 2>&1; then
    echo "==> importing root filesystem as $rootfs"
    "$DOCKER" import "$tar" "$rootfs" >/dev/null
  fi
  echo "==> building $tag"
  DOCKER_BUILDKIT=1 "$DOCKER" build -q --build-arg ROOTFS="$rootfs" --build-arg RECIPE="$BASE_RECIPE" \
    -t "$tag" "$ROOT/images/base" >/dev/null
  "$DOCKER" tag "$tag" troupe/base:latest
  drop_superseded "$old" "$tag"
  echo "    $tag built in $(elapsed "$t0")"
}

# The image a tag named before a rebuild, once nothing else names or uses it, is removed: each
# rebuild of troupe/pytorch would otherwise leave 1.4 GB behind. Docker refuses (and this
# ignores) an image that another tag, a container or a child image still needs.
drop_superseded() {
  local old=$1 tag=$2
  [ -n "$old" ] || return 0
  [ "$old" = "$("$DOCKER" image inspect -f '{{.Id}}' "$tag" 2>/dev/null)" ] && return 0
  "$DOCKER" image rm "$old" >/dev/null 2>&1 || true
}

# An image on top of troupe/base whose Dockerfile installs wheels (bind-mounted, so they are in
# no layer) downloaded on the host from pip's configuration: images/<name>/{Dockerfile,
# requirements.txt}. Usage: build_wheel_image NAME RECIPE_HASH WHAT_IT_INSTALLS
build_wheel_image() {
  local name=$1 recipe=$2 what=$3
  local tag="troupe/$name:$TROUPE_VERSION"
  if [ "$(image_recipe "$tag")" = "$recipe" ]; then echo "==> $tag is up to date"; return; fi
  local ctx t0 old; t0=$(date +%s)
  old=$("$DOCKER" image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  ctx="$CACHE_DIR/$name-context"
  mkdir -p "$ctx/wheels"
  cp "$ROOT/images/$name/Dockerfile" "$ctx/Dockerfile"
  cp "$ROOT/images/$name/requirements.txt" "$ctx/wheels/requirements.txt"
  # Wheels for the image's Python (Debian's, e.g. 3.11.2), not the host's: a release may need a
  # newer patch level (Requires-Python) than the image has.
  local pyver
  pyver=$("$DOCKER" run --rm --network none --entrypoint python3 "troupe/base:$TROUPE_VERSION" \
    -c 'import platform; print(platform.python_version())') || die "no python3 in troupe/base"
  echo "==> downloading wheels for Python $pyver (pip's configured index and local wheel files)"
  "$(command -v python3.11 || command -v python3)" -m pip download -q --disable-pip-version-check \
    --only-binary=:all: --python-version "$pyver" -d "$ctx/wheels" -r "$ctx/wheels/requirements.txt" 2>&1 \
    | { grep -v "^WARNING: Location" || true; } | progress
  echo "==> building $tag ($what)"
  DOCKER_BUILDKIT=1 "$DOCKER" build --progress=plain --build-arg BASE="troupe/base:$TROUPE_VERSION" \
    --build-arg RECIPE="$recipe" -t "$tag" "$ctx" 2>&1 \
    | only '^#[0-9]+ (\[|DONE|ERROR)|error|ERROR:' | progress
  "$DOCKER" image inspect "$tag" >/dev/null 2>&1 || die "building $tag failed"
  "$DOCKER" tag "$tag" "troupe/$name:latest"
  drop_superseded "$old" "$tag"
  echo "    $tag built in $(elapsed "$t0")"
}

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(base pytorch mpi runtime)
for t in "${targets[@]}"; do
  case "$t" in
    base) build_base ;;
    pytorch) build_base; build_wheel_image pytorch "$PYTORCH_RECIPE" "installs PyTorch, JupyterLab and TensorBoard into /opt/venv" ;;
    mpi) build_base; build_wheel_image mpi "$MPI_RECIPE" "Open MPI with apt, mpi4py into /opt/venv" ;;
    runtime) "$ROOT/scripts/build-runtime.sh" "$(build_rootfs_tar)" "$ROOTFS_KEY" ;;
    *) die "unknown image $t (known: base pytorch mpi runtime)" ;;
  esac
done
