#!/usr/bin/env bash
# Multi-host test bed: N simulated hosts on this one machine, for testing cluster sessions that
# span several Docker engines. Each node tt<i> is a network namespace on the host bridge ttbr0
# (underlay 10.123.0.0/24, no default route) with its own dockerd; all nodes form one Docker
# Swarm (node 1 manager, the others workers), so attachable overlay networks span the nodes.
# Each pitfall it avoids is explained where the code avoids it (comments marked P<n>). Run as root.
#
#   testbed.sh up [N]      build a bed of N nodes (1..8, default 3); a no-op when it is healthy
#   testbed.sh down        remove everything the bed made, from any state (idempotent); this
#                          also ends processes left in a node's netns (agents started by exec)
#   testbed.sh status      node health; exit status 0 iff the bed is healthy
#   testbed.sh env [i]     print DOCKER_HOST=... of node i (default 1)
#   testbed.sh exec i CMD  run CMD in node i's network namespace (an "agent on host i")
#
# Environment:
#   TB_IMAGES        images copied from the host engine into every node (space-separated;
#                    default troupe/base:0.1.0; empty: none)
#   TB_FAST=1        down: skip the graceful part (container removal, swarm leave, SIGTERM)
#   TB_STOP_TIMEOUT  down: seconds to wait for a dockerd after SIGTERM before SIGKILL (15)
#   TB_TMPFS=0       up: keep the data-roots on disk instead of a tmpfs at /var/lib/troupe-tb
#                    (the tmpfs makes image loading and removal 3-4x faster; it holds the images,
#                    about 200 MB per node for troupe/base, in memory)
#   TB_TMPFS_SIZE    size limit of that tmpfs (default 50%: half the memory)
#
# Layout of node i: netns tt<i>, host veth tt<i>-h <-> eth0 (10.123.0.(10+i)), socket
# /run/troupe-tb/tt<i>/docker.sock, exec-root /run/troupe-tb/tt<i>/exec, data-root
# /var/lib/troupe-tb/tt<i> (on a tmpfs), cgroup parent /tt<i>, log /run/troupe-tb/tt<i>/dockerd.log.
# The host is 10.123.0.1 on ttbr0: a process listening there (or on 0.0.0.0) is reachable from
# every node. Host iptables change: one FORWARD ACCEPT rule -i/-o ttbr0 tagged troupe-testbed (P2).
# Host sysctl change: the neighbour (ARP) table's limits raised while the bed is up (P15).
set -euo pipefail

readonly DOCKER=/usr/bin/docker # P14: not /usr/local/bin/docker
readonly DOCKERD=/usr/sbin/dockerd
readonly RUN_ROOT=/run/troupe-tb
readonly LIB_ROOT=/var/lib/troupe-tb
readonly BRIDGE=ttbr0
readonly NET=10.123.0
readonly HOST_IP=10.123.0.1
readonly TAG=troupe-testbed
readonly MAX_NODES=8
readonly SWARM_POOL=10.210.0.0/16
# P15: the kernel has one neighbour (ARP/NDP) table for all network namespaces, so the bed's
# nodes share what real hosts each have alone: every kernel of a session that reaches its N-1
# peers holds N-1 entries, and a 64-kernel session (4032) overflows the default hard limit
# (gc_thresh3 = 1024: "neighbour: arp_cache: neighbor table overflow!" in dmesg, connections
# stall in ARP, readiness times out). `up` raises gc_thresh2/3 to at least these (and saves
# the values it found); `down` puts the saved values back.
readonly NEIGH_LIMITS="gc_thresh2=8192 gc_thresh3=16384"
readonly NEIGH_SAVED=/run/troupe-tb.neigh
readonly SHIM_SOCKETS=/run/containerd/s # shared with the host's containerd (P5)
readonly SELF=$(readlink -f "${BASH_SOURCE[0]}")
IMAGES=${TB_IMAGES-troupe/base:0.1.0}
STOP_TIMEOUT=${TB_STOP_TIMEOUT:-15}
TMPFS=${TB_TMPFS:-1}
TMPFS_SIZE=${TB_TMPFS_SIZE:-50%}

die() { echo "testbed: error: $*" >&2; exit 1; }
warn() { echo "testbed: warning: $*" >&2; }
say() { printf '==> %s\n' "$*"; }

# --- time -----------------------------------------------------------------------------------
now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
T0=$(now_us)
# seconds since $1 (µs), 2 decimals
since() { local d=$(($(now_us) - $1)); printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000)); }
# sleep with back-off: the n-th poll (0-based) of a loop sleeps 0.02, 0.05, 0.1, then 0.2 s
backoff() {
  case $1 in 0) sleep 0.02 ;; 1) sleep 0.05 ;; 2 | 3) sleep 0.1 ;; *) sleep 0.2 ;; esac
}

# --- names ----------------------------------------------------------------------------------
node_ip() { echo "$NET.$((10 + $1))"; }
sock() { echo "$RUN_ROOT/tt$1/docker.sock"; }
# docker client against node $1; $DT: client timeout in seconds (default 300)
D() { local i=$1; shift; timeout "${DT:-300}" "$DOCKER" -H "unix://$RUN_ROOT/tt$i/docker.sock" "$@"; }

# --- checks ---------------------------------------------------------------------------------
need_root() { [ "$(id -u)" = 0 ] || die "run as root"; }
need_tools() {
  local t missing=()
  for t in ip:iproute2 bridge:iproute2 nsenter:util-linux unshare:util-linux setsid:util-linux \
    flock:util-linux iptables:iptables containerd:containerd timeout:coreutils \
    sha256sum:coreutils; do
    command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t%%:*} (${t#*:})")
  done
  [ -x "$DOCKER" ] || missing+=("$DOCKER (docker.io)")
  [ -x "$DOCKERD" ] || missing+=("$DOCKERD (docker.io)")
  [ ${#missing[@]} -eq 0 ] ||
    die "missing: ${missing[*]}; scripts/setup.sh installs iproute2, util-linux, iptables, docker.io"
}
valid_index() { [[ $1 =~ ^[1-9][0-9]*$ ]] && [ "$1" -le "$MAX_NODES" ]; }

# One bed operation at a time: lock this script file (fd 9; closed for the dockerds).
lock() {
  exec 9<"$SELF"
  flock -n 9 && return 0
  echo "testbed: waiting for another testbed.sh up/down" >&2
  flock -w 600 9 || die "another testbed.sh up/down is still running"
  T0=$(now_us)
}

# --- processes ------------------------------------------------------------------------------
# alive PID: the process exists and is not a zombie
alive() {
  local st
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}
# argv of PID, NULs as spaces (plus a trailing space)
argv() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null || true; }

# This process and its ancestors: never signalled (e.g. `testbed.sh exec 1 testbed.sh down`).
SELF_PIDS=" "
self_pids() {
  local p=$$ pp
  SELF_PIDS=" $$ "
  while [ "$p" -gt 1 ]; do
    pp=$(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null) || break
    [ -n "$pp" ] || break
    SELF_PIDS+="$pp "
    p=$pp
  done
}

# dockerd_pid I: the pid in node I's pidfile if it is that node's live dockerd
dockerd_pid() {
  local f="$RUN_ROOT/tt$1/docker.pid" pid
  [ -r "$f" ] || return 1
  pid=$(tr -dc 0-9 <"$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && alive "$pid" || return 1
  case "$(argv "$pid")" in
    *dockerd*"--pidfile $RUN_ROOT/tt$1/docker.pid "*) echo "$pid" ;;
    *) return 1 ;;
  esac
}

# node_pids I: every process of node I, one per line:
#  - its dockerd (validated pidfile);
#  - containerd / shims / runc / docker-proxy with /run/troupe-tb/tt<I>/ in their argv (P5);
#  - every process in the netns tt<I> (dockerd and its children, `exec` agents, --net=host);
#  - every process in the cgroups /tt<I> (container processes, orphaned by a killed shim: P6).
node_pids() {
  local i=$1 f p comm d
  {
    dockerd_pid "$i" || true
    for f in $(grep -alF -f <(printf '%s\n' "$RUN_ROOT/tt$i/") /proc/[0-9]*/cmdline 2>/dev/null); do
      p=${f#/proc/}; p=${p%/cmdline}
      comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
      case $comm in dockerd | containerd* | runc* | docker-proxy | docker-init) echo "$p" ;; esac
    done
    [ -e "/run/netns/tt$i" ] && ip netns pids "tt$i" 2>/dev/null
    for d in /sys/fs/cgroup/*/"tt$i"; do
      [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
  } | sort -un | while read -r p; do
    [[ $p =~ ^[0-9]+$ ]] && [[ $SELF_PIDS != *" $p "* ]] && alive "$p" && echo "$p"
  done
  true
}

# signal_until_gone SIG TIMEOUT NODES...: sends SIG once to each process of the nodes (again
# and again for SIGKILL) until none is left or TIMEOUT seconds passed; 0 iff none is left.
signal_until_gone() {
  local sig=$1 tmo=$2 i p n=0 start
  shift 2
  start=$(now_us)
  local -A sent=()
  while :; do
    local pids=()
    for i in "$@"; do mapfile -t -O ${#pids[@]} pids < <(node_pids "$i"); done
    [ ${#pids[@]} -eq 0 ] && return 0
    [ $(($(now_us) - start)) -ge $((tmo * 1000000)) ] && return 1
    for p in "${pids[@]}"; do
      if [ "$sig" = KILL ] || [ -z "${sent[$p]:-}" ]; then
        kill "-$sig" "$p" 2>/dev/null || true
        sent[$p]=1
      fi
    done
    backoff $((n++))
  done
}

# --- discovery ------------------------------------------------------------------------------
# indices of all nodes that left any trace (netns, dirs, veths, cgroups, processes)
discover_nodes() {
  local x n
  local -A seen=()
  for x in /run/netns/tt* "$RUN_ROOT"/tt* "$LIB_ROOT"/tt* /sys/fs/cgroup/*/tt[0-9]* \
    /sys/class/net/tt*-h; do
    n=${x##*/tt}; n=${n%-h}
    [[ $n =~ ^[0-9]+$ ]] && seen[$n]=1
  done
  for x in $(grep -aoE "$RUN_ROOT/tt[0-9]+/" /proc/[0-9]*/cmdline 2>/dev/null); do
    n=${x##*/tt}; n=${n%/}
    [[ $n =~ ^[0-9]+$ ]] && seen[$n]=1
  done
  [ ${#seen[@]} -eq 0 ] || printf '%s\n' "${!seen[@]}" | sort -n
}
any_leftover() {
  [ -n "$(discover_nodes)" ] || [ -e "$RUN_ROOT" ] || [ -e "$LIB_ROOT" ] || [ -e "$NEIGH_SAVED" ] ||
    [ -e "/sys/class/net/$BRIDGE" ] || [[ $(iptables -w -S 2>/dev/null) == *"--comment $TAG"* ]]
}

# --- teardown -------------------------------------------------------------------------------
# shim socket of a containerd shim: /run/containerd/s/sha256("<address>/<namespace>/<id>") (P5)
shim_socket() { echo "$SHIM_SOCKETS/$(printf '%s' "$1/$2/$3" | sha256sum | cut -c1-64)"; }
# shim sockets that node I may own: from live shims' argv and from its containers' ids
node_shim_sockets() {
  local i=$1 p a args ns id addr c
  for p in $(node_pids "$i"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == containerd-shim* ]] || continue
    mapfile -d '' args <"/proc/$p/cmdline" 2>/dev/null || continue
    ns="" id="" addr=""
    for ((a = 0; a < ${#args[@]} - 1; a++)); do
      case ${args[a]} in
        -namespace) ns=${args[a + 1]} ;; -id) id=${args[a + 1]} ;; -address) addr=${args[a + 1]} ;;
      esac
    done
    [ -n "$ns" ] && [ -n "$id" ] && [ -n "$addr" ] && shim_socket "$addr" "$ns" "$id"
  done
  for c in "$LIB_ROOT/tt$i/containers"/*; do
    [ -d "$c" ] && shim_socket "$RUN_ROOT/tt$i/exec/containerd/containerd.sock" moby "${c##*/}"
  done
  true
}

unmount_all() {
  local m round
  for round in 1 2 3 4 5; do
    mapfile -t m < <(awk '{print $5}' /proc/self/mountinfo |
      grep -E "^($RUN_ROOT|$LIB_ROOT)(/|$)" | sort -ru)
    [ ${#m[@]} -eq 0 ] && return 0
    umount -l "${m[@]}" 2>/dev/null || true
  done
  warn "mounts left: ${m[*]}"
}

remove_cgroups() {
  local i=$1 d n
  for d in /sys/fs/cgroup/*/"tt$i"; do
    [ -d "$d" ] || continue
    for n in 0 1 2 3 4 5 6 7 8 9; do
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ -d "$d" ] || break
      backoff "$n"
    done
    [ -d "$d" ] && warn "cgroup $d not removed"
  done
  true
}

# agent_pids I: processes in netns tt<I> other than docker's own (e.g. started by `exec`)
agent_pids() {
  local p
  [ -e "/run/netns/tt$1" ] || return 0
  for p in $(ip netns pids "tt$1" 2>/dev/null); do
    [[ $SELF_PIDS != *" $p "* ]] || continue
    case $(cat "/proc/$p/comm" 2>/dev/null) in
      dockerd | containerd* | runc* | docker-proxy | "") ;;
      *) echo "$p" ;;
    esac
  done
}

# teardown FAST: removes the whole bed (every node found, bridge, rule, dirs);
# sets PHASES (timings of the steps)
PHASES=""
teardown() {
  local fast=$1 i p pid w line t
  local nodes=() socks=() stop=() args=()
  mapfile -t nodes < <(discover_nodes)
  self_pids

  if [ "$fast" != 1 ] && [ ${#nodes[@]} -gt 0 ]; then
    # graceful: containers, swarm, then SIGTERM to dockerds and agents (all in parallel; P10)
    local live=()
    for i in "${nodes[@]}"; do dockerd_pid "$i" >/dev/null && live+=("$i"); done
    t=$(now_us)
    w=()
    for i in "${live[@]}"; do
      (ids=$(DT=10 D "$i" ps -aq 2>/dev/null) && [ -n "$ids" ] &&
        DT=30 D "$i" rm -f $ids >/dev/null 2>&1) &
      w+=($!)
    done
    for p in ${w[@]+"${w[@]}"}; do wait "$p" || true; done
    PHASES+="containers $(since "$t") s, "
    t=$(now_us)
    w=()
    for i in "${live[@]}"; do
      if [ "$i" != 1 ]; then DT=15 D "$i" swarm leave --force >/dev/null 2>&1 & w+=($!); fi
    done
    for p in ${w[@]+"${w[@]}"}; do wait "$p" || true; done
    for i in "${live[@]}"; do
      if [ "$i" = 1 ]; then DT=15 D 1 swarm leave --force >/dev/null 2>&1 || true; fi
    done
    PHASES+="swarm leave $(since "$t") s, "
    t=$(now_us)
    for i in "${nodes[@]}"; do
      if pid=$(dockerd_pid "$i"); then stop+=("$pid"); fi
      mapfile -t -O ${#stop[@]} stop < <(agent_pids "$i")
    done
    for pid in ${stop[@]+"${stop[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
    local n=0 start left
    start=$(now_us)
    while :; do
      left=0
      for pid in ${stop[@]+"${stop[@]}"}; do if alive "$pid"; then left=1; break; fi; done
      [ $left = 0 ] && break
      if [ $(($(now_us) - start)) -ge $((STOP_TIMEOUT * 1000000)) ]; then
        warn "still running ${STOP_TIMEOUT}s after SIGTERM; SIGKILL"
        break
      fi
      backoff $((n++))
    done
    PHASES+="stop $(since "$t") s, "
  fi

  # what is left: shims' sockets first (their argv is needed), then processes
  for i in ${nodes[@]+"${nodes[@]}"}; do mapfile -t -O ${#socks[@]} socks < <(node_shim_sockets "$i"); done
  for i in ${nodes[@]+"${nodes[@]}"}; do
    for p in /sys/fs/cgroup/freezer/"tt$i"; do # a frozen (paused) task cannot die
      [ -d "$p" ] && find "$p" -name freezer.state -exec sh -c 'for f; do echo THAWED >"$f"; done' sh {} + 2>/dev/null
    done
  done
  t=$(now_us)
  if [ ${#nodes[@]} -gt 0 ]; then
    signal_until_gone KILL 15 "${nodes[@]}" || warn "processes left: $(for i in "${nodes[@]}"; do node_pids "$i"; done | tr '\n' ' ')"
  fi
  for p in ${socks[@]+"${socks[@]}"}; do [ -S "$p" ] && rm -f "$p"; done

  unmount_all
  for i in ${nodes[@]+"${nodes[@]}"}; do
    [ -e "/sys/class/net/tt$i-h" ] && ip link del "tt$i-h" 2>/dev/null # P11: before the netns
    if [ -e "/run/netns/tt$i" ]; then ip netns del "tt$i" 2>/dev/null || rm -f "/run/netns/tt$i"; fi
  done
  [ -e "/sys/class/net/$BRIDGE" ] && ip link del "$BRIDGE"
  local rules=()
  mapfile -t rules < <(iptables -w -S 2>/dev/null | grep -- "--comment $TAG" || true)
  for line in ${rules[@]+"${rules[@]}"}; do
    read -ra args <<<"${line/#-A /-D }"
    iptables -w "${args[@]}" || warn "could not delete iptables rule: $line"
  done
  for i in ${nodes[@]+"${nodes[@]}"}; do remove_cgroups "$i"; done
  restore_neigh
  unmount_all
  rm -rf --one-file-system "$RUN_ROOT" "$LIB_ROOT" || warn "could not remove all of $RUN_ROOT $LIB_ROOT"
  PHASES+="cleanup $(since "$t") s"
}

cmd_down() {
  need_root; need_tools; lock
  if ! any_leftover; then echo "down: nothing to remove"; return 0; fi
  local mode=graceful
  [ "${TB_FAST:-0}" = 1 ] && mode=fast
  local n; n=$(discover_nodes | wc -l)
  teardown "${TB_FAST:-0}"
  if any_leftover; then
    die "down ($mode): leftovers remain (nodes: $(discover_nodes | tr '\n' ' '))"
  fi
  echo "down ($mode): removed $n node(s) in $(since "$T0") s ($PHASES)"
}

# --- health ---------------------------------------------------------------------------------
# check_bed N PRINT: 0 iff a bed of exactly N nodes is healthy; PRINT=1 prints a table
check_bed() {
  local want=$1 print=$2 i pid info name state ctl role st line
  local problems=()
  local -A ls_status=() ls_role=()
  local recorded
  recorded=$(cat "$RUN_ROOT/nodes" 2>/dev/null || true)
  [ "$recorded" = "$want" ] || problems+=("recorded size '${recorded:-none}' != $want")
  local found; found=$(discover_nodes | tr '\n' ' ')
  [ "$found" = "$(seq -s ' ' 1 "$want") " ] || problems+=("nodes found: ${found:-none}")
  [[ $(ip -4 -o addr show dev "$BRIDGE" 2>/dev/null) == *" $HOST_IP/24 "* ]] ||
    problems+=("no $BRIDGE $HOST_IP")
  iptables -w -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$TAG" -j ACCEPT \
    2>/dev/null || problems+=("no FORWARD rule $TAG")
  if [ -S "$(sock 1)" ]; then
    while IFS='|' read -r name st role; do
      ls_status[$name]=$st
      case $role in Leader) ls_role[$name]="manager (leader)" ;; Reachable) ls_role[$name]=manager ;;
        "") ls_role[$name]=worker ;; *) ls_role[$name]="manager ($role)" ;; esac
    done < <(DT=10 D 1 node ls --format '{{.Hostname}}|{{.Status}}|{{.ManagerStatus}}' 2>/dev/null || true)
    [ ${#ls_status[@]} -eq "$want" ] || problems+=("swarm has ${#ls_status[@]} nodes, want $want")
  fi
  [ "$print" = 1 ] && printf '%-5s %-12s %-40s %-8s %-8s %-17s %s\n' \
    NODE UNDERLAY SOCKET DOCKERD SWARM ROLE STATUS
  for ((i = 1; i <= want; i++)); do
    pid=$(dockerd_pid "$i") || pid=-
    info="" name="" state="" ctl=""
    [ "$pid" != - ] && info=$(DT=10 D "$i" info --format \
      '{{.Name}}|{{.Swarm.LocalNodeState}}|{{.Swarm.ControlAvailable}}' 2>/dev/null) || true
    IFS='|' read -r name state ctl <<<"$info"
    [ -e "/run/netns/tt$i" ] || problems+=("tt$i: no netns")
    [ "$pid" != - ] || problems+=("tt$i: no dockerd")
    [ -n "$info" ] || { [ "$pid" = - ] || problems+=("tt$i: engine not answering"); }
    [ -z "$info" ] || [ "$name" = "tt$i" ] || problems+=("tt$i: engine name '$name'")
    [ -z "$info" ] || [ "$state" = active ] || problems+=("tt$i: swarm '$state'")
    [ "$i" != 1 ] || [ "$ctl" = true ] || problems+=("tt1: not a manager")
    st=${ls_status[tt$i]:-}
    [ "$st" = Ready ] || problems+=("tt$i: node status '${st:-missing}'")
    [ "$print" = 1 ] && printf '%-5s %-12s %-40s %-8s %-8s %-17s %s\n' "tt$i" "$(node_ip "$i")" \
      "unix://$(sock "$i")" "$pid" "${state:--}" "${ls_role[tt$i]:--}" "${st:--}"
  done
  if [ ${#problems[@]} -eq 0 ]; then
    [ "$print" = 1 ] && echo "healthy: $want node(s) in one swarm; host $HOST_IP on $BRIDGE"
    return 0
  fi
  if [ "$print" = 1 ]; then
    echo "unhealthy:"
    printf '  %s\n' "${problems[@]}"
  fi
  return 1
}

cmd_status() {
  need_root; need_tools
  local n
  n=$(cat "$RUN_ROOT/nodes" 2>/dev/null || true)
  if ! [[ $n =~ ^[0-9]+$ ]]; then
    echo "no test bed"
    if any_leftover; then
      echo "leftovers (nodes: $(discover_nodes | xargs)); remove them with: $0 down"
    fi
    return 1
  fi
  check_bed "$n" 1
}

# --- images (P9: save | load keeps image IDs identical to the host's) ------------------------
declare -A HOST_ID=()
host_image_ids() {
  local img
  for img in $IMAGES; do
    HOST_ID[$img]=$("$DOCKER" image inspect -f '{{.Id}}' "$img" 2>/dev/null) ||
      die "image $img is not in the host engine (scripts/setup.sh builds troupe/*; TB_IMAGES)"
  done
}
# node_lacks_images I: 0 iff node I lacks one of $IMAGES (or has another ID under its name)
node_lacks_images() {
  local img id
  for img in $IMAGES; do
    id=$(DT=30 D "$1" image inspect -f '{{.Id}}' "$img" 2>/dev/null) || return 0
    [ "$id" = "${HOST_ID[$img]}" ] || return 0
  done
  return 1
}
SAVE_PID="" SAVE_TAR="$LIB_ROOT/.images.tar"
start_save() {
  mkdir -p "$LIB_ROOT"
  rm -f "$SAVE_TAR"
  # shellcheck disable=SC2086
  "$DOCKER" save -o "$SAVE_TAR" $IMAGES 9<&- &
  SAVE_PID=$!
}
# sync_images N: copies $IMAGES into the nodes that lack them, in parallel
sync_images() {
  local n=$1 i p rc=0 need=()
  [ -n "${IMAGES// /}" ] || return 0
  for ((i = 1; i <= n; i++)); do node_lacks_images "$i" && need+=("$i"); done
  if [ ${#need[@]} -eq 0 ]; then
    [ -z "$SAVE_PID" ] || { wait "$SAVE_PID" || true; SAVE_PID=""; rm -f "$SAVE_TAR"; }
    return 0
  fi
  local t; t=$(now_us)
  [ -n "$SAVE_PID" ] || start_save
  wait "$SAVE_PID" || die "docker save $IMAGES failed"
  SAVE_PID=""
  local pids=()
  for i in "${need[@]}"; do
    DT=600 D "$i" load -q -i "$SAVE_TAR" >/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  rm -f "$SAVE_TAR"
  [ $rc = 0 ] || die "docker load into a node failed"
  for i in "${need[@]}"; do
    node_lacks_images "$i" && die "tt$i: image IDs differ from the host's after load"
  done
  say "images ($IMAGES) copied into ${need[*]/#/tt} in $(since "$t") s"
}

# --- build ----------------------------------------------------------------------------------
# P15: raise the neighbour table's limits (IPv4 and IPv6) to NEIGH_LIMITS where lower; the
# values found go to NEIGH_SAVED (once: an `up` over a partial bed keeps the first ones)
raise_neigh() {
  local kv key want f cur
  for kv in $NEIGH_LIMITS; do
    key=${kv%%=*} want=${kv#*=}
    for f in /proc/sys/net/ipv4/neigh/default/$key /proc/sys/net/ipv6/neigh/default/$key; do
      [ -w "$f" ] || continue
      cur=$(<"$f")
      [ "$cur" -lt "$want" ] || continue
      [ -e "$NEIGH_SAVED" ] && grep -q "^$f " "$NEIGH_SAVED" || echo "$f $cur" >>"$NEIGH_SAVED"
      echo "$want" >"$f"
    done
  done
}
restore_neigh() {
  local f v
  [ -e "$NEIGH_SAVED" ] || return 0
  while read -r f v; do
    [[ $f == /proc/sys/net/ipv[46]/neigh/default/gc_thresh[23] && $v =~ ^[0-9]+$ ]] || continue
    echo "$v" >"$f" || warn "could not restore $f to $v"
  done <"$NEIGH_SAVED"
  rm -f "$NEIGH_SAVED"
}

setup_network() {
  local n=$1 i
  raise_neigh
  ip link add "$BRIDGE" type bridge
  ip addr add "$HOST_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # P2: bridged frames traverse the host FORWARD chain (policy DROP, br_netfilter)
  iptables -w -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$TAG" -j ACCEPT
  for ((i = 1; i <= n; i++)); do
    ip netns add "tt$i"
    ip link add "tt$i-h" type veth peer name eth0 netns "tt$i"
    ip link set "tt$i-h" master "$BRIDGE" up
    ip -n "tt$i" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "tt$i" link set eth0 up
    ip -n "tt$i" link set lo up
  done
}

start_dockerd() {
  local i=$1 rd="$RUN_ROOT/tt$i" ld="$LIB_ROOT/tt$i"
  mkdir -p "$rd/exec" "$ld"
  # P4: own engine key (not /etc/docker/key.json); also shields from /etc/docker/daemon.json
  printf '{"deprecated-key-path": "%s/key.json"}\n' "$ld" >"$rd/daemon.json"
  # P1: nsenter --net only (ip netns exec would remount /sys and hide the cgroups);
  # P3: own UTS namespace, hostname tt<i> (the swarm node name)
  setsid nsenter --net="/run/netns/tt$i" -- unshare --uts -- \
    /bin/sh -c 'hostname "$0" && exec "$@"' "tt$i" \
    "$DOCKERD" --data-root "$ld" --exec-root "$rd/exec" --pidfile "$rd/docker.pid" \
    --config-file "$rd/daemon.json" -H "unix://$rd/docker.sock" \
    --bip "172.31.$i.1/24" --default-address-pool "base=172.30.$((16 * (i - 1))).0/20,size=24" \
    --cgroup-parent "/tt$i" --swarm-default-advertise-addr "$(node_ip "$i")" \
    --shutdown-timeout 3 </dev/null >"$rd/dockerd.log" 2>&1 9<&- &
  LAUNCHER[$i]=$!
}

declare -A LAUNCHER=()
wait_dockerds() {
  local n=$1 i k=0 start
  local -A pending=()
  for ((i = 1; i <= n; i++)); do pending[$i]=1; done
  start=$(now_us)
  while [ ${#pending[@]} -gt 0 ]; do
    for i in "${!pending[@]}"; do
      if [ -S "$(sock "$i")" ] && DT=5 D "$i" version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        unset "pending[$i]"
      elif ! kill -0 "${LAUNCHER[$i]}" 2>/dev/null && ! dockerd_pid "$i" >/dev/null; then
        tail -n 20 "$RUN_ROOT/tt$i/dockerd.log" >&2 || true
        die "tt$i: dockerd exited (log: $RUN_ROOT/tt$i/dockerd.log)"
      fi
    done
    [ ${#pending[@]} -eq 0 ] && break
    [ $(($(now_us) - start)) -lt 60000000 ] ||
      die "dockerd of ${!pending[*]} not answering after 60 s (logs: $RUN_ROOT/tt*/dockerd.log)"
    backoff $((k++))
  done
}

form_swarm() {
  local n=$1 i p token ip1 k=0 start ready
  ip1=$(node_ip 1)
  DT=60 D 1 swarm init --advertise-addr "$ip1" --listen-addr "$ip1:2377" --data-path-addr "$ip1" \
    --default-addr-pool "$SWARM_POOL" --default-addr-pool-mask-length 24 >/dev/null
  token=$(DT=30 D 1 swarm join-token -q worker)
  local pids=()
  for ((i = 2; i <= n; i++)); do
    local ip; ip=$(node_ip "$i")
    DT=60 D "$i" swarm join --token "$token" --advertise-addr "$ip" --listen-addr "$ip:2377" \
      --data-path-addr "$ip" "$ip1:2377" >/dev/null &
    pids+=($!)
  done
  for p in ${pids[@]+"${pids[@]}"}; do wait "$p" || die "a node could not join the swarm"; done
  start=$(now_us)
  while :; do
    ready=$(DT=10 D 1 node ls --format '{{.Hostname}} {{.Status}}' 2>/dev/null | grep -c ' Ready$' || true)
    [ "$ready" = "$n" ] && break
    [ $(($(now_us) - start)) -lt 60000000 ] || die "only $ready of $n swarm nodes Ready after 60 s"
    backoff $((k++))
  done
}

cmd_up() {
  local n=${1:-3} i t
  valid_index "$n" || die "node count must be 1..$MAX_NODES, not '$n'"
  need_root; need_tools; lock
  host_image_ids
  local table
  if table=$(check_bed "$n" 1); then
    raise_neigh
    sync_images "$n"
    echo "$table"
    echo "up: already healthy ($(since "$T0") s)"
    return 0
  fi
  if any_leftover; then
    t=$(now_us)
    teardown 1
    any_leftover && die "leftovers of an earlier bed could not be removed; see: $0 status"
    say "removed leftovers of an earlier bed in $(since "$t") s"
  fi
  trap up_failed EXIT
  mkdir -p "$RUN_ROOT" "$LIB_ROOT"
  [ "$TMPFS" = 0 ] || mount -t tmpfs -o "mode=0711,size=$TMPFS_SIZE" troupe-tb "$LIB_ROOT"
  # the image export runs while the daemons start
  [ -z "${IMAGES// /}" ] || start_save
  t=$(now_us)
  setup_network "$n"
  for ((i = 1; i <= n; i++)); do start_dockerd "$i"; done
  wait_dockerds "$n"
  say "network and $n dockerds up in $(since "$t") s"
  t=$(now_us)
  form_swarm "$n"
  say "swarm of $n nodes Ready in $(since "$t") s"
  sync_images "$n"
  echo "$n" >"$RUN_ROOT/nodes"
  check_bed "$n" 1 || die "bed not healthy after up"
  trap - EXIT
  echo "up: $n node(s) in $(since "$T0") s"
}

# a failed up leaves the partial bed for inspection, without a stray image export
up_failed() {
  local rc=$?
  [ -z "$SAVE_PID" ] || kill "$SAVE_PID" 2>/dev/null || true
  [ $rc = 0 ] || echo "testbed: up failed; the partial bed is left for inspection" \
    "(logs: $RUN_ROOT/tt*/dockerd.log); remove it with: $SELF down" >&2
}

cmd_env() {
  local i=${1:-1}
  valid_index "$i" || die "node index must be 1..$MAX_NODES, not '$i'"
  echo "DOCKER_HOST=unix://$(sock "$i")"
}

cmd_exec() {
  [ $# -ge 2 ] || die "usage: $0 exec I CMD [ARG...]"
  local i=$1
  shift
  valid_index "$i" || die "node index must be 1..$MAX_NODES, not '$i'"
  need_root
  [ -e "/run/netns/tt$i" ] || die "node tt$i does not exist (run: $0 up)"
  exec nsenter --net="/run/netns/tt$i" -- "$@"
}

usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$SELF"; }

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down ;;
  status) shift; cmd_status ;;
  env) shift; cmd_env "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
