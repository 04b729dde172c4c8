# shellcheck shell=sh
# setup_dist_environ.sh: derive and export the distributed-training variables of a cluster
# session (MASTER_ADDR, MASTER_PORT, TF_CONFIG, torchrun's PET_NNODES, PET_NODE_RANK,
# PET_MASTER_ADDR, PET_MASTER_PORT, Open MPI's default hostfile OMPI_MCA_orte_default_hostfile
# and PRTE_MCA_prte_default_hostfile; with BACKENDAI_DIST_ENV=per-container also WORLD_SIZE,
# RANK, WORLD_RANK, LOCAL_RANK) from the BACKENDAI_* variables (docs/contract.md,
# 'Environment in every kernel').
#
# This is the shell twin of troupe.cluster.dist.derive_dist_env; the unit tests hold the two to
# the same output. Meant to be SOURCED by the kernel entrypoint (`. setup_dist_environ.sh`) under
# any POSIX sh (dash, busybox ash, bash), also with `set -eu` active, so it:
# - does nothing unless BACKENDAI_CLUSTER_SIZE is a number > 1 and BACKENDAI_CLUSTER_HOSTS is
#   a comma-separated list of plain hostnames;
# - never overwrites a variable that is set, even to the empty string;
# - never touches IFS (it splits with parameter expansion, and quotes every expansion), nor the
#   positional parameters or shell options;
# - uses only `_troupe_*` helper variables and unsets them all at the end; defines no function;
# - never calls exit, prints nothing, runs no external command, and ends with status 0.

# A number is ASCII digits; leading zeros are dropped and more than 18 digits is no number.
_troupe_size=${BACKENDAI_CLUSTER_SIZE-}
case "$_troupe_size" in
  '' | *[!0123456789]*) _troupe_size= ;;
  *)
    while :; do
      case "$_troupe_size" in
        0?*) _troupe_size=${_troupe_size#0} ;;
        *) break ;;
      esac
    done
    if [ "${#_troupe_size}" -gt 18 ]; then _troupe_size=; fi
    ;;
esac

_troupe_ok=
case "$_troupe_size" in
  '' | 0 | 1) ;;
  *) _troupe_ok=1 ;;
esac

_troupe_hosts=${BACKENDAI_CLUSTER_HOSTS-}
if [ -z "$_troupe_hosts" ]; then _troupe_ok=; fi

# Every host must be non-empty and need no JSON escaping.
if [ -n "$_troupe_ok" ]; then
  _troupe_rest=$_troupe_hosts
  while :; do
    _troupe_h=${_troupe_rest%%,*}
    case "$_troupe_h" in
      '' | *[!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-]*)
        _troupe_ok=
        break
        ;;
    esac
    case "$_troupe_rest" in
      *,*) _troupe_rest=${_troupe_rest#*,} ;;
      *) break ;;
    esac
  done
fi

if [ -n "$_troupe_ok" ]; then
  # Base port: BACKENDAI_DIST_MASTER_PORT when it is a port number (1..65535), else 29500.
  _troupe_port=${BACKENDAI_DIST_MASTER_PORT-}
  case "$_troupe_port" in
    '' | *[!0123456789]*) _troupe_port= ;;
    *)
      while :; do
        case "$_troupe_port" in
          0?*) _troupe_port=${_troupe_port#0} ;;
          *) break ;;
        esac
      done
      if [ "${#_troupe_port}" -gt 5 ] || [ "$_troupe_port" -lt 1 ] \
        || [ "$_troupe_port" -gt 65535 ]; then
        _troupe_port=
      fi
      ;;
  esac
  if [ -z "$_troupe_port" ]; then _troupe_port=29500; fi

  # This kernel's global rank (BACKENDAI_CLUSTER_LOCAL_RANK, despite its name); 0 if no number.
  _troupe_rank=${BACKENDAI_CLUSTER_LOCAL_RANK-}
  case "$_troupe_rank" in
    '' | *[!0123456789]*) _troupe_rank= ;;
    *)
      while :; do
        case "$_troupe_rank" in
          0?*) _troupe_rank=${_troupe_rank#0} ;;
          *) break ;;
        esac
      done
      if [ "${#_troupe_rank}" -gt 18 ]; then _troupe_rank=; fi
      ;;
  esac
  if [ -z "$_troupe_rank" ]; then _troupe_rank=0; fi

  # TF_CONFIG, byte for byte what Python's json.dumps gives (", " and ": " separators). A
  # host's role is its name less the trailing digits; a role named like a task type is that
  # type; main is the chief when a ps role exists (and no chief role), else a worker; any other
  # role is a worker. The cluster lists chief, worker, ps, evaluator (those with hosts).
  _troupe_main=worker
  _troupe_chief=
  _troupe_rest=$_troupe_hosts
  while :; do
    _troupe_h=${_troupe_rest%%,*}
    case "${_troupe_h%"${_troupe_h##*[!0123456789]}"}" in
      ps) _troupe_main=chief ;;
      chief) _troupe_chief=1 ;;
    esac
    case "$_troupe_rest" in
      *,*) _troupe_rest=${_troupe_rest#*,} ;;
      *) break ;;
    esac
  done
  if [ -n "$_troupe_chief" ]; then _troupe_main=worker; fi
  _troupe_tf='{"cluster": {'
  _troupe_tsep=
  _troupe_mine=worker
  _troupe_idx=$_troupe_rank
  for _troupe_t in chief worker ps evaluator; do
    _troupe_sep=
    _troupe_i=0
    _troupe_n=0
    _troupe_rest=$_troupe_hosts
    while :; do
      _troupe_h=${_troupe_rest%%,*}
      _troupe_r=${_troupe_h%"${_troupe_h##*[!0123456789]}"}
      case "$_troupe_r" in
        chief | worker | ps | evaluator) ;;
        main) _troupe_r=$_troupe_main ;;
        *) _troupe_r=worker ;;
      esac
      if [ "$_troupe_r" = "$_troupe_t" ]; then
        if [ -z "$_troupe_sep" ]; then
          _troupe_tf="$_troupe_tf$_troupe_tsep\"$_troupe_t\": ["
          _troupe_tsep=', '
        fi
        _troupe_tf="$_troupe_tf$_troupe_sep\"$_troupe_h:$((_troupe_port + _troupe_i))\""
        _troupe_sep=', '
        if [ "$_troupe_i" = "$_troupe_rank" ]; then
          _troupe_mine=$_troupe_t
          _troupe_idx=$_troupe_n
        fi
        _troupe_n=$((_troupe_n + 1))
      fi
      _troupe_i=$((_troupe_i + 1))
      case "$_troupe_rest" in
        *,*) _troupe_rest=${_troupe_rest#*,} ;;
        *) break ;;
      esac
    done
    if [ -n "$_troupe_sep" ]; then _troupe_tf="$_troupe_tf]"; fi
  done
  _troupe_tf="$_troupe_tf}, \"task\": {\"type\": \"$_troupe_mine\", \"index\": $_troupe_idx}}"

  if [ -z "${MASTER_ADDR+x}" ]; then
    MASTER_ADDR=${_troupe_hosts%%,*}
    export MASTER_ADDR
  fi
  if [ -z "${MASTER_PORT+x}" ]; then
    MASTER_PORT=$_troupe_port
    export MASTER_PORT
  fi
  if [ -z "${TF_CONFIG+x}" ]; then
    TF_CONFIG=$_troupe_tf
    export TF_CONFIG
  fi
  # Launchers with no flags: torchrun (PET_<option>) and mpirun (its default hostfile).
  if [ -z "${PET_NNODES+x}" ]; then
    PET_NNODES=$_troupe_size
    export PET_NNODES
  fi
  if [ -z "${PET_NODE_RANK+x}" ]; then
    PET_NODE_RANK=$_troupe_rank
    export PET_NODE_RANK
  fi
  if [ -z "${PET_MASTER_ADDR+x}" ]; then
    PET_MASTER_ADDR=${_troupe_hosts%%,*}
    export PET_MASTER_ADDR
  fi
  if [ -z "${PET_MASTER_PORT+x}" ]; then
    PET_MASTER_PORT=$_troupe_port
    export PET_MASTER_PORT
  fi
  if [ -z "${OMPI_MCA_orte_default_hostfile+x}" ]; then
    OMPI_MCA_orte_default_hostfile=/home/config/hostfile
    export OMPI_MCA_orte_default_hostfile
  fi
  if [ -z "${PRTE_MCA_prte_default_hostfile+x}" ]; then
    PRTE_MCA_prte_default_hostfile=/home/config/hostfile
    export PRTE_MCA_prte_default_hostfile
  fi

  if [ "${BACKENDAI_DIST_ENV-}" = per-container ]; then
    if [ -z "${WORLD_SIZE+x}" ]; then
      WORLD_SIZE=$_troupe_size
      export WORLD_SIZE
    fi
    if [ -z "${RANK+x}" ]; then
      RANK=$_troupe_rank
      export RANK
    fi
    if [ -z "${WORLD_RANK+x}" ]; then
      WORLD_RANK=$_troupe_rank
      export WORLD_RANK
    fi
    if [ -z "${LOCAL_RANK+x}" ]; then
      LOCAL_RANK=0
      export LOCAL_RANK
    fi
  fi
fi

unset _troupe_size _troupe_ok _troupe_hosts _troupe_rest _troupe_h _troupe_port _troupe_rank \
  _troupe_tf _troupe_sep _troupe_i _troupe_main _troupe_tsep _troupe_mine _troupe_idx _troupe_t \
  _troupe_n _troupe_r _troupe_chief
