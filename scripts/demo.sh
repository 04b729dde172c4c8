#!/usr/bin/env bash
# The main job, end to end: set everything up, start `troupe server` (unless one answers
# already), create a 3-kernel troupe/pytorch cluster session, run a gloo all-reduce with
# torchrun across the three kernels using only the injected variables, print the result and
# destroy the session. The server keeps running afterwards for you to explore.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
. scripts/common.sh
T=.venv/bin/troupe
URL=${TROUPE_API_URL:-http://127.0.0.1:8090}
export TROUPE_API_URL=$URL

healthy() { .venv/bin/python -c "import httpx,sys; httpx.get('$URL/v1/health', timeout=1).raise_for_status()" 2>/dev/null; }
if ! healthy; then
  DATA=${XDG_DATA_HOME:-$HOME/.local/share}/troupe
  mkdir -p "$DATA"
  echo "==> starting troupe server on $URL (log: $DATA/server.log)"
  setsid "$T" server --port "${URL##*:}" >>"$DATA/server.log" 2>&1 </dev/null &
  echo $! > "$DATA/server.pid"
  for _ in $(seq 1 300); do healthy && break; sleep 0.1; done
  healthy || die "troupe server did not start; see $DATA/server.log"
fi

"$T" session destroy demo >/dev/null 2>&1 || true
t0=$EPOCHREALTIME
"$T" session create demo --image "troupe/pytorch:$TROUPE_VERSION" --cluster-size 3 \
  --cpu 0.5 --mem 1g --wait
t1=$EPOCHREALTIME
echo "==> all-reduce over the three kernels (torchrun in each, launched from main1 over SSH)"
status=0
"$T" session exec demo -- sh -c "$(cat examples/torch-allreduce/launch.sh)" || status=$?
t2=$EPOCHREALTIME
"$T" session destroy demo >/dev/null
awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "==> session RUNNING after %.1f s; all-reduce done %.1f s later; session destroyed\n", b - a, c - b }'
# (the pid only where this script started the server: one that answered already, started by
# someone else, may not be the one a pid file of an earlier run names)
if [ -n "${DATA:-}" ]; then
  echo "    troupe server still runs (pid $(cat "$DATA/server.pid")); try: .venv/bin/troupe session list"
else
  echo "    troupe server still runs at $URL; try: .venv/bin/troupe session list"
fi
exit $status
