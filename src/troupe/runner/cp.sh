#!/bin/sh
# cp.sh get PATH | put PATH NAME: the kernel's side of `troupe session cp`, as user work, with
# tar archives on stdout (get) or stdin (put); relative paths are under /home/work. Owners in
# the archive are not kept (-o: GNU tar's and busybox's --no-same-owner).
#   get: PATH (a file or a directory) as an archive whose top entry is its base name;
#   put: the archive's top entry NAME goes into PATH if that is a directory, else becomes
#        PATH (unpacked next to it first, then renamed, so a failed copy leaves nothing half
#        written under PATH's name) -- what `docker cp` and `kubectl cp` do.
# Started by the runtime's busybox sh: the image's own /bin/sh where there is one (entrypoint.sh).
if [ -x /bin/sh ] && ! [ "/proc/$$/exe" -ef /bin/sh ]; then exec /bin/sh "$0" "$@"; fi
set -u
# the runtime's tools (tar, nc, ...) where the image has none
PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}:/opt/troupe-runtime/bin
op=${1-}
path=${2-}
name=${3-}
fail() { echo "$*" >&2; exit 1; }
[ -n "$path" ] || fail "cp.sh: usage: cp.sh get PATH | put PATH NAME"
case $op in
  get)
    [ -e "$path" ] || fail "no such file or directory: $path"
    dir=$(dirname -- "$path") && base=$(basename -- "$path") || exit 1
    cd -- "$dir" || exit 1
    exec tar -cf - -- "$base"
    ;;
  put)
    case $name in '' | . | .. | */*) fail "cp.sh: bad archive name: $name" ;; esac
    if [ -d "$path" ]; then
      cd -- "$path" || exit 1
      exec tar -xof -
    fi
    parent=$(dirname -- "$path")
    [ -d "$parent" ] || fail "no such directory: $parent"
    tmp=$(mktemp -d "$parent/.troupe-cp.XXXXXX") || exit 1
    if tar -C "$tmp" -xof - && mv -f -T -- "$tmp/$name" "$path"; then
      rc=0
    else
      rc=1
    fi
    rm -rf -- "$tmp"
    exit "$rc"
    ;;
  *) fail "cp.sh: usage: cp.sh get PATH | put PATH NAME" ;;
esac
