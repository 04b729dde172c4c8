# Shared by troupe's shell scripts (sourced, not run).
# The docker.io client: /usr/local/bin may hold another client that does not match the engine.
DOCKER=${TROUPE_DOCKER:-/usr/bin/docker}
TROUPE_VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
CACHE_DIR=${TROUPE_CACHE_DIR:-/var/cache/troupe}

die() { echo "error: $*" >&2; exit 1; }

# The Debian mirror this machine's apt uses (never hard-coded in the project).
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/{u=$2} /^Suites:/ && /bookworm( |$)/{if(u!=""){print u; exit}} /^$/{u=""}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  die "no Debian bookworm mirror found in /etc/apt/sources.list*"
}

# Label troupe.recipe of an image, empty when the image does not exist.
image_recipe() {
  "$DOCKER" image inspect --format '{{index .Config.Labels "troupe.recipe"}}' "$1" 2>/dev/null || true
}
