#!/usr/bin/env bash
# Sets up troupe on a Debian 12 machine, as root, idempotently:
#   1. Debian packages (docker.io, debootstrap, chromium for the web UI's browser tests,
#      prometheus for the test that scrapes /metrics, docker-registry and apache2-utils'
#      htpasswd for the registry tests, ...) when missing;
#   2. dockerd started when it does not answer (a running one is left alone);
#   3. the virtual environment .venv with troupe installed;
#   4. the kernel images troupe/base and troupe/pytorch, built offline and cached
#      (each image carries a hash of its recipe and is rebuilt only when that changes).
# A second run with nothing to do takes a few seconds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/common.sh
. "$ROOT/scripts/common.sh"

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts dockerd)"

step() { printf '\033[1;34m==>\033[0m %s\n' "$*"; }

# --- 1. packages --------------------------------------------------------------
need_pkgs=()
for p in docker.io docker-compose debootstrap busybox-static iptables iproute2 util-linux python3-venv postgresql chromium prometheus rsync docker-registry apache2-utils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  step "installing Debian packages: ${need_pkgs[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi
# docker-registry (the distribution registry) is for the tests, which start their own on
# loopback with TLS and htpasswd auth: never as a system service.
if [ -e /etc/init.d/docker-registry ]; then
  if [ -d /run/systemd/system ]; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  else
    update-rc.d docker-registry disable >/dev/null 2>&1 || true
  fi
fi

# --- 2. docker engine ---------------------------------------------------------
if ! "$DOCKER" info >/dev/null 2>&1; then
  step "starting dockerd (log: /var/log/troupe-dockerd.log)"
  # The host may come with a stale pidfile from a run that was killed: its pid gone, not yet
  # reaped (a zombie answers kill -0) or taken by another program. A live dockerd that does
  # not answer keeps it: the wait below says so.
  # (/proc, not ps: a minimal Debian has no procps)
  if [ -f /var/run/docker.pid ]; then
    pid=$(cat /var/run/docker.pid)
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    if [ -z "$state" ] || [ "$state" = Z ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
      rm -f /var/run/docker.pid
    fi
  fi
  setsid /usr/sbin/dockerd >>/var/log/troupe-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 600); do
    "$DOCKER" info >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$DOCKER" info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see /var/log/troupe-dockerd.log"
fi

# --- 3. virtual environment ---------------------------------------------------
PY=${TROUPE_PYTHON:-$(command -v python3.11 || command -v python3)}
venv_stamp=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/troupe ] || [ "$(cat .venv/.troupe-stamp 2>/dev/null)" != "$venv_stamp" ]; then
  step "installing troupe into .venv"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | { grep -v '^WARNING: Location' || true; }
  echo "$venv_stamp" > .venv/.troupe-stamp
fi
# Bytecode of troupe's own modules: without it (PYTHONDONTWRITEBYTECODE set, or a read-only
# checkout) every command compiles them again, a tenth of a short CLI command's time.
.venv/bin/python -m compileall -q src/troupe >/dev/null

# --- 4. kernel images ---------------------------------------------------------
"$ROOT/scripts/build-images.sh"
step "ready: $("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}' | grep '^troupe/' | sort | tr '\n' ' ')"
