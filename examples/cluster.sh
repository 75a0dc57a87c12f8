#!/usr/bin/env bash
# A dbscheduler cluster in one terminal: three nodes on one PostgreSQL table, the CLI watching.
#
#   bash examples/cluster.sh
#
# Three nodes run examples/cluster_app.py (`dbscheduler run examples.cluster_app:scheduler`),
# each line of their logs prefixed with the node's name; every few seconds `dbscheduler list`
# shows who runs what. After a while the node running the long task is killed with SIGKILL: its
# lease (6 s) expires and another node retries the task (attempt 2: the lost execution
# counts as a failed attempt).
# At the end the surviving nodes get SIGTERM and shut down gracefully.
#
# Settings (environment):
#   DBSCHEDULER_URL     default postgresql+psycopg://postgres@127.0.0.1:5432/test
#   DBSCHEDULER_TABLE   default scheduled_tasks
#   CLUSTER_SECONDS     how long the demo runs (45)
#   CLUSTER_KILL_AFTER  seconds before a node is killed without warning; 0 = never (15)
#   CLUSTER_LIST_EVERY  seconds between two `dbscheduler list` (5)
#   DBSCHEDULER         the command to call (default `dbscheduler`; e.g. "python -m dbscheduler")
set -euo pipefail

cd "$(dirname "$0")/.."  # so that examples.cluster_app is importable
export DBSCHEDULER_URL="${DBSCHEDULER_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test}"
export DBSCHEDULER_TABLE="${DBSCHEDULER_TABLE:-scheduled_tasks}"
duration="${CLUSTER_SECONDS:-45}"
kill_after="${CLUSTER_KILL_AFTER:-15}"
list_every="${CLUSTER_LIST_EVERY:-5}"
read -r -a dbscheduler <<< "${DBSCHEDULER:-dbscheduler}"

"${dbscheduler[@]}" migrate

declare -A pids=()
stop_nodes() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_nodes EXIT

for n in 1 2 3; do
    NODE_ID="node-$n" "${dbscheduler[@]}" run examples.cluster_app:scheduler \
        > >(sed -u "s/^/[node-$n] /") 2>&1 &
    pids["node-$n"]=$!
done

# The node that runs rebuild-index right now, read from `dbscheduler show --json`.
running_node() {
    "${dbscheduler[@]}" show rebuild-index --json 2>/dev/null \
        | sed -n 's/^  "locked_by": "\(node-[0-9]*\)",$/\1/p'
}

start=$SECONDS
killed=no
while (( SECONDS - start < duration )); do
    sleep "$list_every"
    if [[ $killed == no ]] && (( kill_after > 0 && SECONDS - start >= kill_after )); then
        victim=$(running_node)
        if [[ -n $victim && -n ${pids[$victim]:-} ]]; then
            echo "=== kill -9 $victim while it runs rebuild-index;" \
                 "another node takes it over when the lease (6 s) expires"
            kill -KILL "${pids[$victim]}"
            wait "${pids[$victim]}" 2>/dev/null || true
            unset "pids[$victim]"
            killed=yes
        fi
    fi
    echo "=== dbscheduler list ($(( SECONDS - start )) s)"
    "${dbscheduler[@]}" list
done
echo "=== stopping the nodes (SIGTERM: graceful shutdown)"
