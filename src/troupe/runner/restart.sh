#!/bin/sh
# The agent's word to a kernel whose entrypoint supervises it (a session that may restart;
# docs/policies.md, "A restart, in place"), run as root by `docker exec`:
#   restart.sh
# Marks the restart (/run/troupe/restart holds this process's id) and kills every process of the
# kernel but init, the supervisor (its id in /run/troupe/supervisor) and itself: the command, ssh
# sessions and sshd, ready.sh, other execs. The supervisor, its command gone, kills what is left
# (sparing this one) and sets the kernel up again, with the files the agent rewrote before.
# A container started again waits for this word, held (/run/troupe/held; nothing of the kernel
# runs), and so does a supervisor whose command failed (it reported the failure and waits in its
# running container): it is woken by the line "restart" on the kernel's FIFO. It may not have written its
# supervisor's line yet: the line names the container's start (its init's start time, field 22
# of /proc/1/stat), and one of an earlier start is waited out (a few seconds at most).
# Exit 3: no supervisor here (the agent then starts the container again instead).
_run=/run/troupe
_field20() { _boot=${20:-}; }
_boot=""
read -r _boot < /proc/1/stat 2>/dev/null || :
# shellcheck disable=SC2086
_field20 ${_boot##*) }
_n=0
while :; do
  _sup="" _at=""
  read -r _sup _at 2>/dev/null < "$_run/supervisor" || :
  case $_sup in '' | *[!0-9]*) exit 3 ;; esac
  [ "$_at" = "$_boot" ] && [ -d "/proc/$_sup" ] && break
  _n=$((_n + 1))
  [ "$_n" -le 500 ] || exit 3
  sleep 0.01 2>/dev/null || sleep 1
done
echo "$$" > "$_run/restart" || exit 3
# (after the mark: a supervisor not held yet finds the mark before it waits on the FIFO)
if [ -e "$_run/held" ]; then
  [ -p "$_run/events" ] && echo restart 1<> "$_run/events"
  exit 0
fi
for _p in /proc/[0-9]*; do
  _p=${_p#/proc/}
  case $_p in 1 | "$_sup" | "$$") ;; *) kill -9 "$_p" 2>/dev/null ;; esac
done
exit 0
