#!/bin/sh
# The agent's word to a kernel whose entrypoint supervises it (a session that may restart;
# docs/policies.md, "A restart, in place"), run as root by `docker exec`:
#   restart.sh
# Marks the restart (/run/troupe/restart holds this process's id) and kills every process of the
# kernel but init, the supervisor (its id in /run/troupe/supervisor) and itself: the command, ssh
# sessions and sshd, ready.sh, other execs. The supervisor, its command gone, kills what is left
# (sparing this one) and sets the kernel up again, with the files the agent rewrote before.
# Exit 3: no supervisor here (the agent then starts the container again instead).
_run=/run/troupe
_sup=""
read -r _sup 2>/dev/null < "$_run/supervisor" || :
case $_sup in '' | *[!0-9]*) exit 3 ;; esac
[ -d "/proc/$_sup" ] || exit 3
echo "$$" > "$_run/restart" || exit 3
for _p in /proc/[0-9]*; do
  _p=${_p#/proc/}
  case $_p in 1 | "$_sup" | "$$") ;; *) kill -9 "$_p" 2>/dev/null ;; esac
done
exit 0
