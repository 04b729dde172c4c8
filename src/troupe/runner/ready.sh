#!/bin/sh
# Readiness of one kernel, started in the background by entrypoint.sh as it begins:
#   ready.sh TIMEOUT_SECONDS PEER...
# Prints "troupe: ready" on the kernel's output once
#   - the entrypoint set the kernel up (/run/troupe/started), and
#   - this kernel's sshd (if it started one) listens on port 2200 of every address, and
#   - every peer's name resolves and the peer's address answers on the session network.
# The session is RUNNING when every kernel said so: then every kernel resolves every peer and
# reaches every peer's sshd (each sshd listens on all addresses and filters no source; session
# networks filter no port). The agent reads the line from the container's log: no exec round
# trips. On time-out it prints "troupe: not ready after Ns: waiting for ..." instead.
# A peer is probed on PROBE_PORT, where nothing listens: its refusal comes from the peer's own
# network stack and is as good as an accepted connection, and it is nearly free. A connection to
# the peer's sshd is not: sshd forks and re-executes itself for each one (10-15 ms of CPU), and
# N x (N-1) of them took most of the CPU of a start-up at 8 kernels on 2 cores.
# Under bash (used when the image has it) a probe is a builtin redirection to /dev/tcp, which
# also resolves the name: no process per peer and round. Peers found are not probed again.
# Where the agent says when every peer's container started ("peers" on the FIFO, see below),
# no peer is probed before: then one probe each, in the common case.
_timeout=$1
shift
PROBE_PORT=1
_err=/run/troupe/ready.err
# bash's own messages (why a connection failed) in English
LC_ALL=C
export LC_ALL

# sshd_listens: this kernel's sshd writes its PID file (PidFile of troupe.cluster.ssh's
# sshd_config) only once its listening sockets are bound: a file test, no connection (see
# above). Reading /proc/net/tcp instead walks the host's whole TCP table: about 5 ms of system
# CPU per read on a 24 GiB host, a whole period of a kernel limited to 0.05 CPU.
SSHD_PID=/run/sshd-troupe.pid
SSHD_LOG=/var/log/troupe-sshd.log # (the entrypoint's `sshd -E`)
sshd_listens() { [ -s "$SSHD_PID" ]; }

# answers HOST: HOST's name resolves and its address accepts or refuses a connection.
answers() {
  if [ -n "${BASH_VERSION:-}" ]; then
    { : 3<>"/dev/tcp/$1/$PROBE_PORT"; } 2>"$_err" && return 0
    read -r _line < "$_err" || return 1
    case $_line in *"Connection refused"*) return 0 ;; esac
    return 1
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()
except ConnectionRefusedError:
    pass" "$1" "$PROBE_PORT" 2>/dev/null
  elif command -v nc >/dev/null 2>&1; then # (busybox's: the runtime's, on PATH)
    nc -w 2 "$1" "$PROBE_PORT" < /dev/null > /dev/null 2> "$_err" && return 0
    read -r _line < "$_err" || return 1
    case $_line in *"Connection refused"*) return 0 ;; esac
    return 1
  else
    getent hosts "$1" >/dev/null 2>&1
  fi
}

# pause MS: under bash a builtin read with a time-out, so that a round starts no process (an
# external sleep per round and kernel added up to a third of a second of CPU at 8 kernels). It
# reads the FIFO the entrypoint writes a line to once the kernel is set up, and so returns at
# once then: this script need not wake up every 10 ms to look for the `started` marker (each
# timed read costs about 0.3 ms of CPU). Without the FIFO, a pipe no one writes to; elsewhere
# sleep(1).
_events=/run/troupe/events
_woken=0 # whether the entrypoint wakes this script
if [ -n "${BASH_VERSION:-}" ] && [ -p "$_events" ] && [ -r "$_events" ] && [ -w "$_events" ] \
  && eval 'exec 4<> "$_events"'; then
  _woken=1
fi
# _peers_up: whether every peer's container has started, as far as this kernel knows. Where the
# agent says so (the kernel's files then carry /run/troupe/agent-signals, and the FIFO is the
# agent's, bind-mounted: it writes "peers" to it once every kernel of the session started), no
# peer is probed before: a probe of a peer not started yet is a DNS round trip through the
# engine (which forwards unknown names to the host's resolvers), every 10-50 ms in every kernel
# until the last one starts. Without that line within PEERS_FALLBACK seconds, probing starts.
PEERS_FALLBACK=2
_peers_up=1
if [ "$_woken" = 1 ] && [ -e /run/troupe/agent-signals ]; then _peers_up=0; fi
# seconds MS: MS milliseconds as seconds with three decimals, into _s (no subshell)
seconds() { _s="$(( $1 / 1000 )).$(( $1 % 1000 / 100 ))$(( $1 % 100 / 10 ))$(( $1 % 10 ))"; }
if [ "$_woken" = 1 ] || { [ -n "${BASH_VERSION:-}" ] && eval 'exec 4<> <(:)'; }; then
  # (the line read, if any, into _ev: "started" from the entrypoint, "peers" from the agent)
  pause() { seconds "$1"; _ev=""; read -r -t "$_s" -u 4 _ev; }
else
  pause() { seconds "$1"; _ev=""; sleep "$_s" 2>/dev/null || sleep 1; }
fi

# now: seconds into _now (under bash without a subshell: no fork per round)
now() {
  if [ -n "${BASH_VERSION:-}" ]; then _now=$SECONDS; else _now=$(date +%s); fi
}

now
_began=$_now
_end=$(( _now + _timeout ))
_missing="$*"
_set_up=0 # whether the entrypoint is done (then whether it started sshd is known)
_sshd_up=0
_last=0
_gap=10  # ms between peer probes: 10, 20, then 50
_wait=0  # ms until the next probe
while :; do
  now
  [ "$_now" -lt "$_end" ] || _last=1
  if [ "$_set_up" = 0 ] && [ -e /run/troupe/started ]; then
    _set_up=1
    [ -e /run/troupe/sshd ] || _sshd_up=1
  fi
  if [ "$_set_up" = 1 ] && [ "$_sshd_up" = 0 ] && sshd_listens; then _sshd_up=1; fi
  if [ "$_peers_up" = 0 ] && [ $(( _now - _began )) -ge "$PEERS_FALLBACK" ]; then
    _peers_up=1
    _wait=0
  fi
  if [ "$_last" = 1 ] || { [ "$_peers_up" = 1 ] && [ "$_wait" -le 0 ]; }; then
    _left=""
    _stop=0
    for _h in $_missing; do
      # Up to the first peer that does not answer yet (all of them in the last round): peers
      # start at about the same time, and a name not known yet costs a DNS round trip
      # through the engine each time it is asked.
      if [ "$_stop" = 0 ] && answers "$_h"; then continue; fi
      _stop=$(( 1 - _last ))
      _left="$_left $_h"
    done
    _missing=$_left
    _wait=$_gap
    case $_gap in 10) _gap=20 ;; *) _gap=50 ;; esac
  fi
  if [ -z "$_missing" ] && [ "$_sshd_up" = 1 ]; then
    echo "troupe: ready"
    exit 0
  fi
  if [ "$_last" = 1 ]; then
    _why=""
    if [ "$_set_up" = 0 ]; then
      _why=" set-up"
    elif [ "$_sshd_up" = 0 ]; then
      # (and sshd's last word, where it left one: "Cannot bind any address.", say; sshd goes
      # to the background before it binds, so the entrypoint saw it start)
      _why=" ssh:2200"
      _said=""
      if [ -r "$SSHD_LOG" ]; then
        while IFS= read -r _line || [ -n "$_line" ]; do _said=$_line; done < "$SSHD_LOG"
      fi
      _said=${_said%"$(printf '\r')"} # (sshd ends its lines with CR LF)
      [ -z "$_said" ] || _why="$_why (sshd: $_said)"
    fi
    for _h in $_missing; do
      if getent hosts "$_h" >/dev/null 2>&1; then _why="$_why net:$_h"; else _why="$_why name:$_h"; fi
    done
    echo "troupe: not ready after ${_timeout}s: waiting for$_why"
    exit 1
  fi
  # Until the next probe of the peers; but every 10 ms while sshd starts (a short while), and
  # while the entrypoint is not done if it cannot wake this script; with every peer found, or
  # before the agent's "peers", until the entrypoint or the agent wakes it (or 1 s).
  _tick=$_wait
  if [ "$_set_up" = 1 ] && [ "$_sshd_up" = 0 ]; then
    _tick=10
  elif [ "$_set_up" = 0 ] && [ "$_woken" = 0 ]; then
    _tick=10
  elif [ -z "$_missing" ] || [ "$_peers_up" = 0 ]; then
    _tick=1000
  fi
  [ "$_tick" -ge 10 ] || _tick=10
  pause "$_tick"
  _wait=$(( _wait - _tick ))
  if [ "$_ev" = peers ] && [ "$_peers_up" = 0 ]; then
    _peers_up=1
    _wait=0
  fi
done
