#!/bin/sh
# Readiness of one kernel, started in the background by entrypoint.sh once the kernel is set up:
#   ready.sh TIMEOUT_SECONDS PEER...
# Prints "troupe: ready" on the kernel's output once every peer's name resolves and, when this
# kernel runs sshd (then its peers, of the same image, do too), every peer's port 2200 accepts
# connections. The agent reads that line from the container's log: no exec round trips. On
# time-out it prints "troupe: not ready after Ns: waiting for ..." instead.
# Under bash (used when the image has it) a check is a builtin redirection to /dev/tcp, which
# also resolves the name: no process per peer and round. Peers found are not checked again.
_timeout=$1
shift
_ssh=0
[ -e /run/troupe/sshd ] && _ssh=1

reachable() {
  if [ "$_ssh" = 0 ]; then
    getent hosts "$1" >/dev/null 2>&1
  elif [ -n "${BASH_VERSION:-}" ]; then
    { : 3<>"/dev/tcp/$1/2200"; } 2>/dev/null
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "import socket,sys; socket.create_connection((sys.argv[1], 2200), 2).close()" "$1" 2>/dev/null
  else
    getent hosts "$1" >/dev/null 2>&1
  fi
}

now() {
  if [ -n "${BASH_VERSION:-}" ]; then echo "$SECONDS"; else date +%s; fi
}

_end=$(( $(now) + _timeout ))
_delay=0.01
_missing="$*"
while :; do
  _left=""
  for _h in $_missing; do
    reachable "$_h" || _left="$_left $_h"
  done
  _missing=$_left
  if [ -z "$_missing" ]; then
    echo "troupe: ready"
    exit 0
  fi
  if [ "$(now)" -ge "$_end" ]; then
    _why=""
    for _h in $_missing; do
      if getent hosts "$_h" >/dev/null 2>&1; then _why="$_why ssh:$_h:2200"; else _why="$_why name:$_h"; fi
    done
    echo "troupe: not ready after ${_timeout}s: waiting for$_why"
    exit 1
  fi
  sleep "$_delay" 2>/dev/null || sleep 1
  case $_delay in 0.01) _delay=0.02 ;; *) _delay=0.05 ;; esac
done
