#!/bin/sh
# Apps in main1 (docs/apps.md). The manager runs this as user `work` in /home/work through
# exec.sh, so an app gets the kernel's environment like every other entry path:
#   app.sh status DIR NAME:PORT...
#   app.sh start DIR NAME PORT SECONDS COMMAND
# DIR holds each app's files: NAME.log (its output; the previous run's in NAME.log.1),
# NAME.pid (its process group) and NAME.exit (its exit code, or "timeout").
# `status` prints one line "app NAME STATE DETAIL" per app, STATE being
#   running  - something accepts connections on 127.0.0.1:PORT (whoever started it);
#   starting - the app's process runs but does not answer yet;
#   failed   - it was started and ended (DETAIL says how), or ended with code 0: stopped;
#   stopped  - it was never started here;
# and for an app that is not running, its log's last lines as "log NAME LINE".
# `start` starts COMMAND (`/bin/sh -c`) detached, in a session of its own (setsid), its output
# appended to NAME.log, unless it is running or starting already; then waits until PORT
# answers (exit 0), the command ends, or SECONDS pass: then its process group is killed, so
# nothing is left half-started (exit 1). It prints what `status` prints for the app.
# Probes are bash's /dev/tcp (a builtin: no process per probe), else python3.
if [ -z "${BASH_VERSION:-}" ] && [ -x /bin/bash ]; then exec /bin/bash "$0" "$@"; fi
TAIL_LINES=20

# answers PORT: something accepts a connection on 127.0.0.1:PORT.
answers() {
  if [ -n "${BASH_VERSION:-}" ]; then
    { : 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c "
import socket, sys
socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()" "$1" 2>/dev/null
  else
    return 2
  fi
}

# alive NAME: the app's process (its group's leader) still runs.
alive() {
  [ -s "$dir/$1.pid" ] || return 1
  read -r _pid < "$dir/$1.pid" || return 1
  kill -0 "$_pid" 2>/dev/null || return 1
  # a zombie not reaped yet has ended too
  { read -r _stat < "/proc/$_pid/stat"; } 2>/dev/null || return 0
  case $_stat in *") Z "*) return 1 ;; esac
}

# state NAME PORT: the app's state into _state, why into _detail.
state() {
  _detail=""
  if answers "$2"; then
    _state=running
  elif alive "$1"; then
    _state=starting
  elif [ -s "$dir/$1.exit" ]; then
    read -r _code < "$dir/$1.exit"
    case $_code in
      0) _state=stopped _detail="exited with code 0" ;;
      timeout) _state=failed _detail="did not answer on port $2 in time and was stopped" ;;
      ended) _state=failed _detail="ended" ;;
      *) _state=failed _detail="exited with code $_code" ;;
    esac
  elif [ -e "$dir/$1.pid" ]; then
    _state=failed _detail="ended"
  else
    _state=stopped
  fi
}

# report NAME PORT: the status lines of one app.
report() {
  state "$1" "$2"
  echo "app $1 $_state $_detail"
  if [ "$_state" != running ] && [ -r "$dir/$1.log" ]; then
    tail -n "$TAIL_LINES" "$dir/$1.log" 2>/dev/null | while IFS= read -r _line || [ -n "$_line" ]; do
      echo "log $1 $_line"
    done
  fi
}

# stop NAME: ends the app's process group (TERM, then KILL after 2 s).
stop() {
  alive "$1" || return 0
  kill -s TERM -- "-$_pid" 2>/dev/null || kill -s TERM "$_pid" 2>/dev/null
  _i=0
  while [ "$_i" -lt 20 ] && alive "$1"; do sleep 0.1; _i=$((_i + 1)); done
  kill -s KILL -- "-$_pid" 2>/dev/null || kill -s KILL "$_pid" 2>/dev/null
}

cmd=${1-}
dir=${2-}
[ -n "$dir" ] || { echo "app.sh: usage: app.sh status|start DIR ..." >&2; exit 2; }
mkdir -p "$dir" || exit 2
case $cmd in
  status)
    shift 2
    for _app in "$@"; do report "${_app%%:*}" "${_app##*:}"; done
    exit 0
    ;;
  start) ;;
  *) echo "app.sh: usage: app.sh status|start DIR ..." >&2; exit 2 ;;
esac

name=$3 port=$4 seconds=$5 command=$6
case $name$port$seconds in */* | *' '*) echo "app.sh: bad arguments" >&2; exit 2 ;; esac
answers "$port"
case $? in
  0) report "$name" "$port"; exit 0 ;;
  2) echo "app $name failed this image has neither bash nor python3 to check port $port"; exit 1 ;;
esac
if ! alive "$name"; then
  [ -e "$dir/$name.log" ] && mv -f "$dir/$name.log" "$dir/$name.log.1"
  rm -f "$dir/$name.exit"
  echo "troupe: starting $name: $command" > "$dir/$name.log"
  # The app's own shell writes its exit code; the wrapper is the group's leader.
  _wrap='/bin/sh -c "$1"; _c=$?; echo "troupe: $0 exited with code $_c"; echo "$_c" > "$2"'
  if command -v setsid >/dev/null 2>&1; then
    setsid /bin/sh -c "$_wrap" "$name" "$command" "$dir/$name.exit" \
      < /dev/null >> "$dir/$name.log" 2>&1 &
  else
    /bin/sh -c "$_wrap" "$name" "$command" "$dir/$name.exit" < /dev/null >> "$dir/$name.log" 2>&1 &
  fi
  echo $! > "$dir/$name.pid"
fi
_end=$(( $(date +%s) + seconds ))
_gap=0.1
while :; do
  if answers "$port"; then report "$name" "$port"; exit 0; fi
  if ! alive "$name"; then
    [ -s "$dir/$name.exit" ] || echo "ended" > "$dir/$name.exit"
    report "$name" "$port"
    exit 1
  fi
  if [ "$(date +%s)" -ge "$_end" ]; then
    stop "$name"
    echo "troupe: $name did not answer on port $port within ${seconds}s: stopped" >> "$dir/$name.log"
    echo timeout > "$dir/$name.exit"
    report "$name" "$port"
    exit 1
  fi
  sleep "$_gap" 2>/dev/null || sleep 1
  _gap=0.25
done
