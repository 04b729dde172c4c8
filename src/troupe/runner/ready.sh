#!/bin/sh
# Readiness check of one kernel, run by the agent through exec:
#   ready.sh TIMEOUT_SECONDS PEER...
# Succeeds once this kernel's entrypoint finished, every peer's name resolves and, when this
# image runs sshd, every peer's port 2200 accepts connections. On time-out it prints what was
# still missing and exits 1. Short back-off polls, no fixed sleeps.
_timeout=$1
shift
_end=$(( $(date +%s) + _timeout ))
_delay=0.02
tcp_open() {
  if [ -x /bin/bash ]; then
    timeout 2 /bin/bash -c "exec 3<>/dev/tcp/$1/2200" 2>/dev/null
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "import socket,sys; socket.create_connection((sys.argv[1], 2200), 2).close()" "$1" 2>/dev/null
  else
    return 0
  fi
}
while :; do
  _missing=""
  [ -e /run/troupe/started ] || _missing="entrypoint of this kernel"
  if [ -z "$_missing" ]; then
    for _h in "$@"; do
      if ! getent hosts "$_h" >/dev/null 2>&1; then
        _missing="$_missing name:$_h"
      elif [ -e /run/troupe/sshd ] && ! tcp_open "$_h"; then
        _missing="$_missing ssh:$_h:2200"
      fi
    done
  fi
  [ -z "$_missing" ] && exit 0
  if [ "$(date +%s)" -ge "$_end" ]; then
    echo "not ready after ${_timeout}s: waiting for$_missing"
    exit 1
  fi
  sleep "$_delay" 2>/dev/null || sleep 1
  case $_delay in 0.02) _delay=0.05 ;; 0.05) _delay=0.1 ;; *) _delay=0.2 ;; esac
done
