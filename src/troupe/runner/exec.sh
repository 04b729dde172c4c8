#!/bin/sh
# Runs a command with the kernel's environment as the entrypoint derived it, so that
# `troupe session exec` sees what the startup command and SSH logins see.
# Started by the runtime's busybox sh: the image's own /bin/sh where there is one (entrypoint.sh).
if [ -x /bin/sh ] && ! [ "/proc/$$/exe" -ef /bin/sh ]; then exec /bin/sh "$0" "$@"; fi
if [ -r /run/troupe/environ.sh ]; then . /run/troupe/environ.sh; fi
# a command `/bin/sh ...` in an image without /bin/sh: the runtime's sh
if [ "${1-}" = /bin/sh ] && [ ! -x /bin/sh ] && [ -x /opt/troupe-runtime/bin/sh ]; then
  shift
  set -- /opt/troupe-runtime/bin/sh "$@"
fi
exec "$@"
