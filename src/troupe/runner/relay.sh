#!/bin/sh
# relay.sh PORT: joins stdin/stdout to 127.0.0.1:PORT inside this kernel, for `troupe session
# tunnel | ssh | forward` (the agent runs it with `docker exec`, so it reaches sshd, and
# notebooks bound to localhost, whatever network the kernel is on).
# With python3: the end of stdin half-closes the connection (the program on PORT reads EOF and
# may still answer), and the relay ends when the program closes its side. Without python3,
# bash's /dev/tcp: the end of stdin closes the whole connection; else nc (the runtime's busybox
# has it). None: exit 127.
# Started by the runtime's busybox sh: the image's own /bin/sh where there is one (entrypoint.sh).
if [ -x /bin/sh ] && ! [ "/proc/$$/exe" -ef /bin/sh ]; then exec /bin/sh "$0" "$@"; fi
# the runtime's tools (tar, nc, ...) where the image has none
PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}:/opt/troupe-runtime/bin
port=${1-}
case $port in
  '' | *[!0123456789]*) echo "relay.sh: usage: relay.sh PORT" >&2; exit 2 ;;
esac
if command -v python3 >/dev/null 2>&1; then
  exec python3 -c '
import os, socket, sys, threading
port = int(sys.argv[1])
try:
    s = socket.create_connection(("127.0.0.1", port))
except OSError as e:
    sys.stderr.write(f"{socket.gethostname()}: nothing accepts connections on port {port}"
                     f" ({e.strerror or e})\n")
    sys.exit(1)

def up():
    try:
        while data := os.read(0, 65536):
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass

threading.Thread(target=up, daemon=True).start()
try:
    while data := s.recv(65536):
        while data:
            data = data[os.write(1, data):]
except OSError:
    pass
os._exit(0)
' "$port"
fi
if [ -x /bin/bash ]; then
  exec /bin/bash -c '
exec 3<>"/dev/tcp/127.0.0.1/$1" 4<&0 || exit 1
{ cat <&4 >&3; kill "$$"; } 2>/dev/null &
exec cat <&3' relay "$port"
fi
# The runtime's busybox nc: the whole connection ends with stdin.
if command -v nc >/dev/null 2>&1; then exec nc 127.0.0.1 "$port"; fi
echo "relay.sh: this image has neither python3 nor bash nor nc: no tunnel into it" >&2
exit 127
