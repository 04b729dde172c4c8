#!/bin/sh
# troupe kernel entrypoint (POSIX sh: dash, busybox sh, bash). Mounted read-only from the agent
# at /opt/troupe, run as root under Docker's init. It prepares what every kernel of a cluster
# session shares, then runs the command (batch main1) or idles, as user `work`:
#   1. distributed-training variables (setup_dist_environ.sh, if present);
#   2. user `work` with the session's uid/gid, home /home/work;
#   3. SSH: the session key, pinned known_hosts, sshd on port 2200 (if the image has sshd);
#   4. the environment files that make the same variables visible to `exec` (exec.sh),
#      login shells (/etc/profile.d) and SSH commands (~/.ssh/environment);
#   5. /run/troupe/started, which the readiness check waits for.
# Settings come from /home/config/kernel.conf, put into the container by the agent.
set -u
_troupe_dir=$(dirname "$0")
_troupe_conf=/home/config
_troupe_run=/run/troupe
_troupe_uid=1000
_troupe_gid=1000
_troupe_wait_go=0
_troupe_chown=""
if [ -f "$_troupe_conf/kernel.conf" ]; then . "$_troupe_conf/kernel.conf"; fi
mkdir -p "$_troupe_run"

# 1. Distributed-training variables.
if [ -f "$_troupe_dir/setup_dist_environ.sh" ]; then
  . "$_troupe_dir/setup_dist_environ.sh"
else
  echo "troupe: warning: $_troupe_dir/setup_dist_environ.sh not found; distributed-training variables are not set" >&2
fi

# 1b. With more than one interface (e.g. an overlay plus Docker's gateway bridge), tell gloo,
#     NCCL and Open MPI which one is the session network: the one holding this kernel's
#     address. A value the user set is kept.
_troupe_nifs=$(ls /sys/class/net 2>/dev/null | grep -vc '^lo$')
if [ "${BACKENDAI_CLUSTER_SIZE:-1}" != 1 ] && [ "${_troupe_nifs:-0}" -gt 1 ] \
    && command -v ip >/dev/null 2>&1; then
  _troupe_ip=$(getent hosts "${BACKENDAI_CLUSTER_HOST:-$(hostname)}" | awk '{print $1; exit}')
  _troupe_if=$(ip -o -4 addr show | awk -v ip="$_troupe_ip" \
    '{ split($4, a, "/"); if (a[1] == ip) { print $2; exit } }')
  if [ -n "$_troupe_if" ]; then
    [ -n "${GLOO_SOCKET_IFNAME+x}" ] || export GLOO_SOCKET_IFNAME="$_troupe_if"
    [ -n "${NCCL_SOCKET_IFNAME+x}" ] || export NCCL_SOCKET_IFNAME="$_troupe_if"
    [ -n "${OMPI_MCA_btl_tcp_if_include+x}" ] || export OMPI_MCA_btl_tcp_if_include="$_troupe_if"
    [ -n "${OMPI_MCA_oob_tcp_if_include+x}" ] || export OMPI_MCA_oob_tcp_if_include="$_troupe_if"
  fi
fi

# 2. User work.
_troupe_shell=/bin/sh
if [ -x /bin/bash ]; then _troupe_shell=/bin/bash; fi
if [ "$(id -u)" = 0 ]; then
  if ! grep -q '^work:' /etc/passwd; then
    if command -v useradd >/dev/null 2>&1; then
      grep -q '^work:' /etc/group || groupadd -o -g "$_troupe_gid" work
      useradd -o -M -d /home/work -s "$_troupe_shell" -u "$_troupe_uid" -g "$_troupe_gid" -p '*' work
    else
      echo "work:x:$_troupe_uid:$_troupe_gid::/home/work:$_troupe_shell" >> /etc/passwd
      grep -q '^work:' /etc/group || echo "work:x:$_troupe_gid:" >> /etc/group
      if [ -f /etc/shadow ]; then echo 'work:*:19000:0:99999:7:::' >> /etc/shadow; fi
    fi
  fi
  mkdir -p /home/work
  chown "$_troupe_uid:$_troupe_gid" /home/work
  for _troupe_d in $_troupe_chown; do chown "$_troupe_uid:$_troupe_gid" "$_troupe_d"; done
fi

# 3. SSH.
if [ -d "$_troupe_conf/ssh" ] && [ "$(id -u)" = 0 ]; then
  mkdir -p /home/work/.ssh
  for _troupe_f in id_cluster id_cluster.pub authorized_keys config known_hosts; do
    cp "$_troupe_conf/ssh/$_troupe_f" "/home/work/.ssh/$_troupe_f"
    chmod 600 "/home/work/.ssh/$_troupe_f"
  done
  chmod 700 /home/work/.ssh
  chown -R "$_troupe_uid:$_troupe_gid" /home/work/.ssh
  if [ -x /usr/sbin/sshd ]; then
    mkdir -p /etc/ssh /run/sshd
    chmod 755 /run/sshd
    cp "$_troupe_conf/ssh/host_ed25519_key" /etc/ssh/troupe_host_ed25519_key
    chmod 600 /etc/ssh/troupe_host_ed25519_key
    if /usr/sbin/sshd -f "$_troupe_conf/ssh/sshd_config" -E /var/log/troupe-sshd.log; then
      : > "$_troupe_run/sshd"
    else
      echo "troupe: warning: sshd did not start (see /var/log/troupe-sshd.log); SSH is unavailable" >&2
    fi
  else
    echo "troupe: warning: this image has no /usr/sbin/sshd; SSH between kernels is unavailable" >&2
  fi
fi

# 4. Environment files (written before the command starts, so every entry path sees the same).
_troupe_skip='HOME|PWD|OLDPWD|SHLVL|USER|LOGNAME|SHELL|MAIL|TERM|_'
export -p | grep -Ev "^(export|declare -x) ($_troupe_skip)=" > "$_troupe_run/environ.sh"
chmod 644 "$_troupe_run/environ.sh"
if [ -d /etc/profile.d ] && [ -w /etc/profile.d ]; then
  echo '[ -r /run/troupe/environ.sh ] && . /run/troupe/environ.sh' > /etc/profile.d/zz-troupe.sh
fi
if [ -d /home/work/.ssh ]; then
  env | grep -E '^[A-Za-z_][A-Za-z0-9_]*=' | grep -Ev "^($_troupe_skip)=" > /home/work/.ssh/environment
  chown "$_troupe_uid:$_troupe_gid" /home/work/.ssh/environment
  chmod 600 /home/work/.ssh/environment
fi
: > "$_troupe_run/started"

# 5. The command, as user work. A batch main1 waits until the session is ready.
if [ "$_troupe_wait_go" = 1 ]; then
  while [ ! -e "$_troupe_run/go" ]; do sleep 0.05 2>/dev/null || sleep 1; done
fi
if [ $# -eq 0 ]; then set -- /bin/sh -c 'while :; do sleep 86400; done'; fi
cd /home/work 2>/dev/null || cd /
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
  exec setpriv --reuid="$_troupe_uid" --regid="$_troupe_gid" --init-groups \
    env HOME=/home/work USER=work LOGNAME=work "$@"
fi
exec "$@"
