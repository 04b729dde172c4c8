#!/bin/sh
# troupe kernel entrypoint (POSIX sh: dash, busybox sh, bash). Mounted read-only from the agent
# at /opt/troupe, run as root under Docker's init; the runtime (OpenSSH, setpriv, busybox) is
# at /opt/troupe-runtime where the agent has one (src/troupe/agent/runtime.py). It prepares what every kernel of a cluster
# session shares, then runs the command (batch main1) or idles, as user `work`:
#   1. distributed-training variables (setup_dist_environ.sh, if present);
#   2. user `work` with the session's uid/gid (its home and SSH files, owned and with their
#      modes, come with the kernel's files: step 0);
#   3. sshd on port 2200 with the session's host key (the runtime's, else the image's);
#   4. the environment files that make the same variables visible to `exec` (exec.sh),
#      login shells (/etc/profile.d) and SSH commands (~/.ssh/environment);
#   5. "troupe: started" on the kernel's output; ready.sh, started in the background at the
#      beginning, says "troupe: ready" once this is done and every peer is reachable; the
#      agent reads both lines from the log.
# Start-up speed matters (a session is RUNNING when its slowest kernel is ready, and a kernel
# may have a small share of a core): shell builtins wherever they do, few processes.
# Settings come from /home/config/kernel.conf, put into the container by the agent.
set -u
# The agent starts this with its runtime's busybox sh (/opt/troupe-runtime, any image): go on
# under the image's own /bin/sh where there is one, so that commands are the image's programs
# (busybox's sh runs its own applets in their place).
if [ -x /bin/sh ] && ! [ "/proc/$$/exe" -ef /bin/sh ]; then exec /bin/sh "$0" "$@"; fi
_troupe_dir=${0%/*}
# The runtime (OpenSSH, setpriv, busybox's tools), last on PATH: the image's programs win.
_troupe_rt=/opt/troupe-runtime
[ -x "$_troupe_rt/bin/sh" ] || _troupe_rt=""
if [ -n "$_troupe_rt" ]; then
  export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}:$_troupe_rt/bin"
fi
_troupe_conf=/home/config
_troupe_run=/run/troupe
_troupe_uid=1000
_troupe_gid=1000
_troupe_wait_go=0
_troupe_chown=""
_troupe_ready_timeout=300
_troupe_root=0
while read -r _troupe_k _troupe_real _troupe_eff _troupe_rest; do # (no `id -u` process)
  case $_troupe_k in Uid:) [ "$_troupe_eff" = 0 ] && _troupe_root=1; break ;; esac
done < /proc/self/status
# The supervisor (docs/policies.md, "A restart, in place"). In a kernel of a session that may
# restart, the agent sets TINI_KILL_PROCESS_GROUP in the container (Docker's init then signals
# this script's whole process group, the command included: `docker stop`'s SIGTERM reaches the
# command, as it did when this script exec'd it). Then this script stays: it runs the command in
# the foreground (a background job of a shell without job control, and this one has no
# terminal, would have SIGINT and SIGQUIT ignored), exits with its status (a failure it reports
# to the agent instead where it can, and waits, held: see below) and, on the agent's
# word (runner/restart.sh, run as root by `docker exec`: it writes /run/troupe/restart and kills
# every process but init, this script and itself), kills whatever is left and sets the kernel
# up again from step 0 with the files the agent rewrote. Elsewhere it exec's the command.
_troupe_supervised=0
_troupe_sig=""
if [ -n "${TINI_KILL_PROCESS_GROUP:-}" ]; then
  _troupe_supervised=1
  unset TINI_KILL_PROCESS_GROUP # (not the command's: a tini of its own would act on it)
  # a signal to the group is the command's business; before the command runs, a stop
  trap '_troupe_sig=143' TERM
  trap '_troupe_sig=130' INT
  trap '_troupe_sig=129' HUP
  trap '_troupe_sig=131' QUIT
  trap : USR1 USR2
fi
# Kills every process of the kernel but init, this script and $1 (the agent's word, ending),
# and waits until they have ended, for at most 30 s (a process stuck in the kernel does not end
# at all: then a warning): a SIGKILL takes effect only once its process runs, and a process
# with much memory frees it all before it closes its files, which at a small CPU share takes
# seconds. An old sshd still bound to port 2200 makes the new one fail to bind after it went to
# the background ("Cannot bind any address": no PID file, no readiness); an old command may
# hold GPU memory. A process has ended when each of its threads has (a zombie main thread
# waits for the others, and the last one out frees what they share). Each round kills again,
# for what forked meanwhile; a stop ends the wait. (`kill` and `read` are builtins in every
# sh: a process per round only where one must wait, the `sleep`, at longer and longer pauses:
# they take CPU from the dying.)
_troupe_sweep() {
  _troupe_round=0
  _troupe_until=""
  while :; do
    _troupe_live=0
    for _troupe_p in /proc/[0-9]*; do
      _troupe_p=${_troupe_p#/proc/}
      case $_troupe_p in 1 | "$$" | "$1") continue ;; esac
      kill -9 "$_troupe_p" 2>/dev/null || continue
      [ "$_troupe_live" = 1 ] && continue # (one is enough to wait: the others are killed)
      for _troupe_t in "/proc/$_troupe_p/task/"[0-9]*; do
        _troupe_st=""
        read -r _troupe_st 2>/dev/null < "$_troupe_t/stat" || continue
        case ${_troupe_st##*) } in Z* | X*) ;; *) _troupe_live=1 && break ;; esac
      done
    done
    [ "$_troupe_live" = 1 ] && [ -z "$_troupe_sig" ] || break
    # seconds since boot, whole (/proc/uptime: no `date` process; without it, by the rounds)
    _troupe_now=""
    read -r _troupe_now _troupe_rest 2>/dev/null < /proc/uptime || :
    _troupe_now=${_troupe_now%.*}
    case $_troupe_now in '' | *[!0-9]*) _troupe_now=$((_troupe_round / 10)) ;; esac
    if [ -z "$_troupe_until" ]; then
      _troupe_until=$((_troupe_now + 30))
    elif [ "$_troupe_now" -ge "$_troupe_until" ]; then
      echo "troupe: warning: processes of the last attempt did not end within 30 s" >&2
      break
    fi
    # (none before the second round: it kills what forked meanwhile at once)
    case $_troupe_round in 0) _troupe_pause="" ;; 1) _troupe_pause=0.01 ;; 2) _troupe_pause=0.02 ;;
      3) _troupe_pause=0.05 ;; *) _troupe_pause=0.1 ;; esac
    if [ -n "$_troupe_pause" ]; then sleep "$_troupe_pause" 2>/dev/null || sleep 1; fi
    _troupe_round=$((_troupe_round + 1))
  done
}

# This start of the container: its init's start time (field 22 of /proc/1/stat, builtins only).
# The supervisor's file names it next to its process id, so that restart.sh never takes the
# supervisor of an earlier start of this container for this one's (process ids differ).
_troupe_boot=""
read -r _troupe_boot < /proc/1/stat 2>/dev/null || :
_troupe_field20() { _troupe_boot=${20:-}; } # (a function's own arguments: no subshell)
# shellcheck disable=SC2086
_troupe_field20 ${_troupe_boot##*) }
# A supervised kernel whose container is started again (it ran a supervisor before: the agent
# starts a failed kernel's container at once, before the restart is decided) is held: nothing
# of the kernel runs (no files unpacked, no sshd, no readiness, no command) until the agent's
# word, which comes only once the manager restarts the session in place (else the container is
# removed with the session). The word is the line "restart" on the kernel's FIFO (the agent
# writes it to its end, bind-mounted, even before this start: no `docker exec`; restart.sh
# writes it too) or, where there is no FIFO, the file the word leaves (restart.sh). A stop
# meanwhile ends the container at once.
# Held: waits for the word ($_troupe_word: restart.sh's mark, if any). $1, where given, is the
# line that reports the command's failure to the agent on the kernel's report FIFO (written
# once held: a word sent from then on is the FIFO's line), kept open until the word (its data
# lives while an end is open, for an agent that opens its end later) and written again every
# 5 s by a helper until then (a report the agent lost, say to its own restart, is not the
# kernel's end: the agent drops the copies of one it has).
_troupe_await_word() {
  : > "$_troupe_run/held"
  _troupe_again=""
  if [ -n "${1:-}" ]; then
    exec 7<> "$_troupe_run/exits" && echo "$1" >&7
    (while sleep 5; do echo "$1" >&7 || exit 0; done) &
    _troupe_again=$!
  fi
  _troupe_fifo=0
  if [ -p "$_troupe_run/events" ] && [ -r "$_troupe_run/events" ] && [ -w "$_troupe_run/events" ]; then
    exec 8<> "$_troupe_run/events" && _troupe_fifo=1
  fi
  while [ ! -e "$_troupe_run/restart" ]; do
    [ -z "$_troupe_sig" ] || exit "$_troupe_sig"
    if [ "$_troupe_fifo" = 1 ]; then
      _troupe_line=""
      read -r _troupe_line <&8 || :      # (a signal ends the wait: checked above)
      [ "$_troupe_line" = restart ] && break
    else
      sleep 0.05 2>/dev/null || sleep 1 # (polled: the word leaves its file)
    fi
  done
  [ "$_troupe_fifo" = 1 ] && exec 8<&-
  [ -z "$_troupe_again" ] || { kill "$_troupe_again" 2>/dev/null; exec 7>&-; }
  _troupe_word=""
  [ -e "$_troupe_run/restart" ] && { read -r _troupe_word < "$_troupe_run/restart" || :; }
}
if [ "$_troupe_supervised" = 1 ] && [ -e "$_troupe_run/supervisor" ]; then
  [ -e "$_troupe_run/restart" ] && rm -f "$_troupe_run/restart" # (of an earlier start)
  echo "$$ $_troupe_boot" > "$_troupe_run/supervisor"
  _troupe_await_word
  _troupe_sweep "${_troupe_word%% *}" # (the marks go with the round's markers)
fi

# One attempt per round (one round unless supervised; the body, the rest of this script, is not
# indented).
while :; do
# 0. The kernel's files (kernel.conf, ~work/.ssh, the host key, ...), with their owners and
#    modes: the agent bind-mounts them as a tar (or, for an image that does not start as root,
#    puts them into the container before it starts).
if [ -f /opt/troupe-files.tar ] && [ "$_troupe_root" = 1 ]; then
  tar -xpf /opt/troupe-files.tar -C / || echo "troupe: cannot unpack the kernel's files" >&2
fi
if [ -f "$_troupe_conf/kernel.conf" ]; then . "$_troupe_conf/kernel.conf"; fi
[ -d "$_troupe_run" ] || mkdir -p "$_troupe_run"
# A restart in place starts this container again: the last start's markers are old news (a
# test per marker, one `rm` for all: no process where there is nothing to remove, as on a first
# start). (and an attempt in place: this container's last attempt's; the old sshd's PID file
# and log too, so that ready.sh's report quotes this attempt's sshd; the word's marks)
_troupe_old=""
for _troupe_f in started go sshd ready.err restart held /run/sshd-troupe.pid /var/log/troupe-sshd.log; do
  case $_troupe_f in /*) ;; *) _troupe_f="$_troupe_run/$_troupe_f" ;; esac
  [ -e "$_troupe_f" ] && _troupe_old="$_troupe_old $_troupe_f"
done
# shellcheck disable=SC2086
[ -z "$_troupe_old" ] || rm -f $_troupe_old
if [ "$_troupe_supervised" = 1 ]; then echo "$$ $_troupe_boot" > "$_troupe_run/supervisor"; fi
# sh: the image's, else the runtime's; the login shell (and ready.sh's): bash where there is one
_troupe_sh=/bin/sh
if [ ! -x /bin/sh ] && [ -n "$_troupe_rt" ]; then _troupe_sh="$_troupe_rt/bin/sh"; fi
_troupe_shell=$_troupe_sh
if [ -x /bin/bash ]; then _troupe_shell=/bin/bash; fi

# 0b. Readiness, in the background from here on: ready.sh probes the peers while this script
#     sets the kernel up, and says "troupe: ready" only once it is (the `started` marker).
_troupe_peers=""
_troupe_ifs=$IFS
IFS=,
for _troupe_h in ${BACKENDAI_CLUSTER_HOSTS:-}; do
  [ "$_troupe_h" = "${BACKENDAI_CLUSTER_HOST:-}" ] || _troupe_peers="$_troupe_peers $_troupe_h"
done
IFS=$_troupe_ifs
# (under bash: the image's, else the runtime's through its loader; else sh)
if [ "$_troupe_shell" != /bin/bash ] && [ -n "$_troupe_rt" ] && [ -f "$_troupe_rt/libexec/bash" ]; then
  "$_troupe_rt/lib/ld-linux-x86-64.so.2" --library-path "$_troupe_rt/lib" "$_troupe_rt/libexec/bash" \
    "$_troupe_dir/ready.sh" "$_troupe_ready_timeout" $_troupe_peers >&2 &
else
  "$_troupe_shell" "$_troupe_dir/ready.sh" "$_troupe_ready_timeout" $_troupe_peers >&2 &
fi

# Whether file $1 has a line starting with "$2:" (no grep: one process less).
_troupe_has() {
  [ -r "$1" ] || return 1
  while IFS= read -r _troupe_line || [ -n "$_troupe_line" ]; do
    case "$_troupe_line" in "$2":*) return 0 ;; esac
  done < "$1"
  return 1
}

# 1. Distributed-training variables.
if [ -f "$_troupe_dir/setup_dist_environ.sh" ]; then
  . "$_troupe_dir/setup_dist_environ.sh"
else
  echo "troupe: warning: $_troupe_dir/setup_dist_environ.sh not found; distributed-training variables are not set" >&2
fi

# 1b. With more than one interface (e.g. an overlay plus Docker's gateway bridge), tell gloo,
#     NCCL and Open MPI which one is the session network: the one holding this kernel's
#     address. A value the user set is kept.
_troupe_nifs=0
for _troupe_f in /sys/class/net/*; do
  case "${_troupe_f##*/}" in lo | '*') ;; *) _troupe_nifs=$((_troupe_nifs + 1)) ;; esac
done
if [ "${BACKENDAI_CLUSTER_SIZE:-1}" != 1 ] && [ "$_troupe_nifs" -gt 1 ] \
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

# 2. User work (appended like useradd -o would, without its locking and helpers).
#    An image with no /etc/passwd (or no root in it) gets root too: the engine's `exec -u root`
#    looks the name up; and sshd's privilege separation user where the runtime's sshd runs.
if [ "$_troupe_root" = 1 ]; then
  _troupe_has /etc/passwd root || echo "root:x:0:0:root:/root:$_troupe_sh" >> /etc/passwd
  _troupe_has /etc/group root || echo "root:x:0:" >> /etc/group
  if [ -n "$_troupe_rt" ] && ! _troupe_has /etc/passwd sshd; then
    echo "sshd:x:74:65534::/run/sshd:/nonexistent" >> /etc/passwd
  fi
  [ -d /tmp ] || mkdir -m 1777 /tmp # (a scratch image may have none)
  _troupe_has /etc/group work || echo "work:x:$_troupe_gid:" >> /etc/group
  if ! _troupe_has /etc/passwd work; then
    echo "work:x:$_troupe_uid:$_troupe_gid::/home/work:$_troupe_shell" >> /etc/passwd
    if [ -f /etc/shadow ]; then echo 'work:*:19000:0:99999:7:::' >> /etc/shadow; fi
  fi
  [ -d /home/work ] || { mkdir -p /home/work && chown "$_troupe_uid:$_troupe_gid" /home/work; }
  for _troupe_d in $_troupe_chown; do chown "$_troupe_uid:$_troupe_gid" "$_troupe_d"; done
fi

# 3. SSH (the host key is in /etc/ssh, the user's files in ~/.ssh already): the runtime's sshd
#    where there is a runtime (a known version for the config; the image's is not needed),
#    else the image's.
_troupe_sshd=/usr/sbin/sshd
if [ -n "$_troupe_rt" ]; then _troupe_sshd="$_troupe_rt/bin/sshd"; fi
if [ -f "$_troupe_conf/ssh/sshd_config" ] && [ "$_troupe_root" = 1 ]; then
  if [ -x "$_troupe_sshd" ]; then
    [ -d /run/sshd ] || mkdir -p /run/sshd
    [ -d /var/log ] || mkdir -p /var/log
    if "$_troupe_sshd" -f "$_troupe_conf/ssh/sshd_config" -E /var/log/troupe-sshd.log; then
      : > "$_troupe_run/sshd"
    else
      echo "troupe: warning: sshd did not start (see /var/log/troupe-sshd.log); SSH is unavailable" >&2
    fi
  else
    echo "troupe: warning: this image has no /usr/sbin/sshd; SSH between kernels is unavailable" >&2
  fi
fi

# 4. Environment files (written before the command starts, so every entry path sees the same):
#    /run/troupe/environ.sh (the shell's `export -p`, sourced by exec.sh and login shells) and
#    ~/.ssh/environment (NAME=value, read by sshd; it came empty, with its owner and mode).
#    Both in one pass over `export -p` with builtins: no grep/env/chown processes.
_troupe_skip=' HOME PWD OLDPWD SHLVL USER LOGNAME SHELL MAIL TERM _ '
_troupe_sshenv=/dev/null
if [ -f /home/work/.ssh/environment ] && [ "$_troupe_root" = 1 ]; then
  _troupe_sshenv=/home/work/.ssh/environment
fi
_troupe_envfiles() {
  while IFS= read -r _troupe_line || [ -n "$_troupe_line" ]; do
    _troupe_name=""
    case $_troupe_line in
      "export "*) _troupe_name=${_troupe_line#export } ;;
      "declare -x "*) _troupe_name=${_troupe_line#declare -x } ;;
    esac
    case $_troupe_name in # (none: a line of a multi-line value; no "=": no value; kept)
      *=*)
        _troupe_name=${_troupe_name%%=*}
        case $_troupe_skip in *" $_troupe_name "*) continue ;; esac
        eval "_troupe_value=\${$_troupe_name}"
        printf '%s=%s\n' "$_troupe_name" "$_troupe_value" >&3
        ;;
    esac
    printf '%s\n' "$_troupe_line"
  done
}
(
  umask 022 # (in a subshell: the command keeps the umask it would have had)
  export -p | _troupe_envfiles > "$_troupe_run/environ.sh" 3> "$_troupe_sshenv"
  if [ -d /etc/profile.d ] && [ -w /etc/profile.d ]; then
    echo '[ -r /run/troupe/environ.sh ] && . /run/troupe/environ.sh' > /etc/profile.d/zz-troupe.sh
  fi
)
echo "troupe: started" >&2
: > "$_troupe_run/started" # (after the line: ready.sh's line must come later in the log)
# wake ready.sh, which waits on this FIFO of the kernel's files (opened read-write: never blocks)
if [ -p "$_troupe_run/events" ] && [ -w "$_troupe_run/events" ]; then
  echo started 1<> "$_troupe_run/events"
fi

# 6. The command, as user work. A batch main1 waits until the session is ready.
if [ "$_troupe_wait_go" = 1 ]; then
  while [ ! -e "$_troupe_run/go" ] && [ ! -e "$_troupe_run/restart" ] && [ -z "$_troupe_sig" ]; do
    sleep 0.05 2>/dev/null || { [ -e "$_troupe_run/restart" ] || sleep 1; }
  done
fi
if [ $# -eq 0 ]; then set -- "$_troupe_sh" -c 'while :; do sleep 86400; done'; fi
# (a command `/bin/sh -c ...` in an image without /bin/sh: the runtime's sh)
if [ "$1" = /bin/sh ] && [ "$_troupe_sh" != /bin/sh ]; then shift; set -- "$_troupe_sh" "$@"; fi
cd /home/work 2>/dev/null || cd /
_troupe_setpriv=setpriv
if [ -n "$_troupe_rt" ]; then _troupe_setpriv="$_troupe_rt/bin/setpriv"; fi
_troupe_drop=0
if [ "$_troupe_root" = 1 ] && command -v "$_troupe_setpriv" >/dev/null 2>&1; then _troupe_drop=1; fi
if [ "$_troupe_supervised" = 0 ]; then
  if [ "$_troupe_drop" = 1 ]; then
    export HOME=/home/work USER=work LOGNAME=work
    exec "$_troupe_setpriv" --reuid="$_troupe_uid" --regid="$_troupe_gid" --init-groups "$@"
  fi
  exec "$@"
fi
# Supervised: the command in the foreground; its status is this script's, the container's.
# (In a subshell that exec's it, with this shell's own stderr on /dev/null meanwhile: a
# shell's report of a command killed by a signal, "Killed", is no line of the kernel's.)
_troupe_status=${_troupe_sig:-0}
if [ ! -e "$_troupe_run/restart" ] && [ -z "$_troupe_sig" ]; then
  exec 9>&2 2>/dev/null
  if [ "$_troupe_drop" = 1 ]; then
    (
      export HOME=/home/work USER=work LOGNAME=work
      exec "$_troupe_setpriv" --reuid="$_troupe_uid" --regid="$_troupe_gid" --init-groups \
        "$@" 2>&9 9>&-
    )
  else
    (exec "$@" 2>&9 9>&-)
  fi
  _troupe_status=$?
  exec 2>&9 9>&-
fi
# A failure (non-zero, no stop asked for, no process of the kernel killed for memory: the
# engine then makes the kernel anew) where the agent takes reports: what is left of the attempt
# goes (as with a container that died: sshd, ready.sh, strays holding memory or GPUs), the
# failure is told to the agent on the report FIFO ("exit STATUS ATTEMPT"), and the container
# is left running, held until the word (the agent reports it as the kernel's exit: a restart
# needs no new start of this container). Elsewhere the status ends the container.
if [ ! -e "$_troupe_run/restart" ]; then
  _troupe_oom=0
  for _troupe_f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    [ -r "$_troupe_f" ] || continue # (cgroup v2's count, else v1's)
    while read -r _troupe_k _troupe_v; do
      [ "$_troupe_k" = oom_kill ] && _troupe_oom=$_troupe_v
    done < "$_troupe_f"
    break
  done
  if [ "$_troupe_status" = 0 ] || [ -n "$_troupe_sig" ] || [ "$_troupe_oom" != 0 ] \
      || ! [ -p "$_troupe_run/exits" ] || ! [ -w "$_troupe_run/exits" ]; then
    exit "$_troupe_status"
  fi
  _troupe_sweep ""
  _troupe_await_word "exit $_troupe_status ${TROUPE_RESTART_COUNT:-0}"
else
  _troupe_word=""
  read -r _troupe_word < "$_troupe_run/restart" || :
fi
# The agent's word: what is left goes, and the kernel is set up again (its files first). A stop
# from here on (the sweep may take a while) ends the container, here or in the set-up.
_troupe_sig=""
_troupe_sweep "${_troupe_word%% *}"
[ -z "$_troupe_sig" ] || exit "$_troupe_sig"
rm -f "$_troupe_run/restart"
done
