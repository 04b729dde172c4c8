#!/bin/sh
# Runs a command with the kernel's environment as the entrypoint derived it, so that
# `troupe session exec` sees what the startup command and SSH logins see.
if [ -r /run/troupe/environ.sh ]; then . /run/troupe/environ.sh; fi
exec "$@"
