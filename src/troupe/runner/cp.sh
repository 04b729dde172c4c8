#!/bin/sh
# cp.sh get PATH | put PATH NAME: the kernel's side of `troupe session cp`, as user work, with
# tar archives on stdout (get) or stdin (put); relative paths are under /home/work.
#   get: PATH (a file or a directory) as an archive whose top entry is its base name;
#   put: the archive's top entry NAME goes into PATH if that is a directory, else becomes
#        PATH (unpacked next to it first, then renamed, so a failed copy leaves nothing half
#        written under PATH's name) -- what `docker cp` and `kubectl cp` do.
set -u
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
      exec tar -xf - --no-same-owner
    fi
    parent=$(dirname -- "$path")
    [ -d "$parent" ] || fail "no such directory: $parent"
    tmp=$(mktemp -d "$parent/.troupe-cp.XXXXXX") || exit 1
    if tar -C "$tmp" -xf - --no-same-owner && mv -f -T -- "$tmp/$name" "$path"; then
      rc=0
    else
      rc=1
    fi
    rm -rf -- "$tmp"
    exit "$rc"
    ;;
  *) fail "cp.sh: usage: cp.sh get PATH | put PATH NAME" ;;
esac
