#!/usr/bin/env bash
# Builds the kernel runtime (docs/contract.md, "What troupe adds to an image"), offline, from
# Debian packages already on this machine:
#   - OpenSSH (sshd, ssh, scp, sftp, sftp-server, ssh-keygen), util-linux's setpriv and bash, taken
#     from the debootstrap root filesystem of troupe/base (ROOTFS_TAR), with every shared
#     library they load and glibc's own loader; they run through that loader
#     (`ld-linux-x86-64.so.2 --library-path <runtime>/lib ...`), so they need nothing of the
#     image they run in;
#   - this machine's static busybox (Debian's busybox-static) for sh, tar, nc, env, ...
# into $CACHE_DIR/runtime/<key>/ (key: hash of this script, the root filesystem's recipe and
# busybox's version), then points $CACHE_DIR/runtime/current at it. The agent bind-mounts that
# directory read-only at /opt/troupe-runtime in every kernel (src/troupe/agent/runtime.py).
# A runtime already built is kept as it is; older ones stay (running kernels may mount them).
# Usage: build-runtime.sh ROOTFS_TAR ROOTFS_KEY
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/common.sh
. "$ROOT/scripts/common.sh"

ROOTFS_TAR=$1
ROOTFS_KEY=$2
MOUNT=/opt/troupe-runtime
BUSYBOX=${TROUPE_BUSYBOX:-/bin/busybox}
# Programs taken from the root filesystem: path in it -> name in the runtime.
PROGRAMS=(
  usr/sbin/sshd:sshd usr/bin/ssh:ssh usr/bin/scp:scp usr/bin/sftp:sftp
  usr/lib/openssh/sftp-server:sftp-server usr/bin/ssh-keygen:ssh-keygen usr/bin/setpriv:setpriv
  usr/bin/bash:bash
)
# In libexec only, with no wrapper on PATH: bash runs the runner's readiness probe (ready.sh:
# builtin /dev/tcp probes and timed reads, no process per probe) in images without bash; a
# user's `bash` stays the image's (or none).
NO_WRAPPER=" bash "
# What each wrapper adds to the program's own arguments:
#  sshd: -r, no re-execution (sshd would run libexec/sshd directly, without the loader);
#  scp, sftp: the runtime's ssh (they run /usr/bin/ssh otherwise).
declare -A EXTRA=([sshd]="-r" [scp]="-S $MOUNT/bin/ssh" [sftp]="-S $MOUNT/bin/ssh")

[ -x "$BUSYBOX" ] || die "no static busybox at $BUSYBOX (Debian package busybox-static)"
# (Readers that read to the end, not `head -1` or `grep -q`: under pipefail, a writer cut off
# by SIGPIPE fails the pipeline now and then, and set -e ended set-up with status 141.)
file -L "$BUSYBOX" 2>/dev/null | grep 'statically linked' >/dev/null || die "$BUSYBOX is not static"
bb_version=$("$BUSYBOX" | sed -n 1p)
key=$( { cat "${BASH_SOURCE[0]}"; echo "$ROOTFS_KEY"; echo "$bb_version"; } | sha256sum | cut -c1-16)
dest="$CACHE_DIR/runtime/$key"
if [ -s "$dest/manifest" ]; then
  ln -sfn "$key" "$CACHE_DIR/runtime/current"
  echo "==> runtime $key is up to date"
  exit 0
fi

t0=$(date +%s)
echo "==> building the kernel runtime $key (OpenSSH from the root filesystem, busybox)"
mkdir -p "$CACHE_DIR/runtime"
work=$(mktemp -d /var/tmp/troupe-runtime.XXXXXX)
trap 'rm -rf "$work"' EXIT
root="$work/root" out="$work/out"
mkdir -p "$root" "$out/bin" "$out/lib" "$out/libexec"
members=()
for p in "${PROGRAMS[@]}"; do
  case $p in usr/lib/*) ;; *) members+=("./${p%%:*}") ;; esac # (./usr/lib is extracted whole)
done
tar -xf "$ROOTFS_TAR" -C "$root" ./usr/lib ./usr/lib64 ./var/lib/dpkg/status "${members[@]}"
multiarch="$root/usr/lib/x86_64-linux-gnu"
loader="$multiarch/ld-linux-x86-64.so.2"
[ -x "$loader" ] || die "no glibc loader in $ROOTFS_TAR"

# Each program and the closure of its shared libraries, as the root filesystem's loader
# resolves them (no chroot: --list of the loader itself).
for p in "${PROGRAMS[@]}"; do
  src="$root/${p%%:*}" name=${p##*:}
  cp "$src" "$out/libexec/$name"
  "$loader" --library-path "$multiarch" --list "$src" \
    | awk '$2 == "=>" && $3 ~ /^\// {print $3}' \
    | while read -r lib; do cp -L "$lib" "$out/lib/$(basename "$lib")"; done
  case $NO_WRAPPER in *" $name "*) continue ;; esac
  extra=${EXTRA[$name]:-}
  printf '#!%s/bin/sh\n# %s from Debian, through its own loader and libraries\nexec %s/lib/ld-linux-x86-64.so.2 --library-path %s/lib %s/libexec/%s %s"$@"\n' \
    "$MOUNT" "$name" "$MOUNT" "$MOUNT" "$MOUNT" "$name" "${extra:+$extra }" > "$out/bin/$name"
  chmod 0755 "$out/bin/$name"
done
cp -L "$loader" "$out/lib/ld-linux-x86-64.so.2"

# busybox and its applets, but not those names the wrappers hold (busybox's setpriv cannot
# change the uid).
cp "$BUSYBOX" "$out/bin/busybox"
for applet in $("$BUSYBOX" --list); do
  [ -e "$out/bin/$applet" ] || ln -s busybox "$out/bin/$applet"
done

# A smoke test, outside any container: the programs load.
"$out/lib/ld-linux-x86-64.so.2" --library-path "$out/lib" "$out/libexec/ssh" -V 2>&1 | grep OpenSSH >/dev/null \
  || die "the runtime's ssh does not run"
"$out/lib/ld-linux-x86-64.so.2" --library-path "$out/lib" "$out/libexec/setpriv" --version >/dev/null \
  || die "the runtime's setpriv does not run"

# manifest: what is in it, with versions and sizes (docs/contract.md quotes them).
pkg_version() { awk -v p="$1" '$1=="Package:"{x=($2==p)} x && $1=="Version:"{print $2; exit}' "$root/var/lib/dpkg/status"; }
{
  echo "key $key"
  echo "openssh $(pkg_version openssh-server)"
  echo "util-linux $(pkg_version util-linux)"
  echo "bash $(pkg_version bash)"
  echo "libc6 $(pkg_version libc6)"
  echo "busybox $bb_version"
  echo "bytes $(du -sb "$out" | cut -f1)"
  echo "bytes.lib $(du -sb "$out/lib" | cut -f1)"
  echo "bytes.libexec $(du -sb "$out/libexec" | cut -f1)"
  echo "bytes.busybox $(stat -c %s "$out/bin/busybox")"
  (cd "$out/lib" && ls | sed 's/^/lib /')
} > "$out/manifest"
chmod -R go-w "$out"
rm -rf "$dest"
mv "$out" "$dest"
ln -sfn "$key" "$CACHE_DIR/runtime/current"
echo "    runtime ready in $(( $(date +%s) - t0 )) s: $dest ($(du -sh "$dest" | cut -f1))"
