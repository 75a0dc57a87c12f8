#!/usr/bin/env bash
# A dbscheduler cluster in one terminal: three nodes on one table, the CLI watching.
#
#   bash examples/cluster.sh
#
# Three nodes run examples/cluster_app.py (`dbscheduler run examples.cluster_app:scheduler`),
# each line of their logs prefixed with the node's name; every few seconds `dbscheduler list`
# shows who runs what. After a while the node running the long task is killed with SIGKILL: its
# lease (6 s) expires and another node retries the task (attempt 2: the lost execution
# counts as a failed attempt); the demo runs on until it has shown that takeover.
# At the end the surviving nodes get SIGTERM and shut down gracefully.
#
# By default the nodes share a SQLite file in the current directory (cluster.sqlite3): three
# processes on one machine need nothing else. For PostgreSQL (what the example is written
# for; the database must exist):
#   DBSCHEDULER_URL=postgresql://postgres@127.0.0.1:5432/postgres bash examples/cluster.sh
#
# Settings (environment):
#   DBSCHEDULER_URL     default sqlite:///cluster.sqlite3
#   DBSCHEDULER_TABLE   default scheduled_tasks
#   CLUSTER_SECONDS     how long the demo runs (45)
#   CLUSTER_KILL_AFTER  seconds before a node is killed without warning; 0 = never (15)
#   CLUSTER_LIST_EVERY  seconds between two `dbscheduler list` (5)
#   DBSCHEDULER         the command to call (default: `dbscheduler` on the PATH, else the
#                       checkout's .venv/bin/dbscheduler; e.g. "python -m dbscheduler")
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # examples.cluster_app, from any directory
export DBSCHEDULER_URL="${DBSCHEDULER_URL:-sqlite:///cluster.sqlite3}"
export DBSCHEDULER_TABLE="${DBSCHEDULER_TABLE:-scheduled_tasks}"
duration="${CLUSTER_SECONDS:-45}"
kill_after="${CLUSTER_KILL_AFTER:-15}"
list_every="${CLUSTER_LIST_EVERY:-5}"
if [[ -n ${DBSCHEDULER:-} ]]; then
    read -r -a dbscheduler <<< "$DBSCHEDULER"
elif command -v dbscheduler >/dev/null; then
    dbscheduler=(dbscheduler)
elif [[ -x $root/.venv/bin/dbscheduler ]]; then
    dbscheduler=("$root/.venv/bin/dbscheduler")
else
    echo "cluster.sh: no dbscheduler command: it is not on the PATH and $root/.venv does not" \
         "have it. Install it first:" >&2
    echo "  cd $root && python3 -m venv .venv && .venv/bin/pip install -e '.[postgresql]'" >&2
    exit 1
fi

"${dbscheduler[@]}" migrate

# Each node's output also goes to a file, so that the script can see the moment a node starts
# the long task: a `dbscheduler` call starts a Python process (a second or more on a busy
# machine), so what it reports may be seconds old when it arrives.
logs=$(mktemp -d)
declare -A pids=()
stop_nodes() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$logs"
}
trap stop_nodes EXIT

for n in 1 2 3; do
    NODE_ID="node-$n" "${dbscheduler[@]}" run examples.cluster_app:scheduler \
        > >(tee "$logs/node-$n.log" | sed -u "s/^/[node-$n] /") 2>&1 &
    pids["node-$n"]=$!
done

# How many times each live node has logged PATTERN so far, as "node-1=2 node-3=1".
count_lines() {
    local node
    for node in "${!pids[@]}"; do
        echo "$node=$(grep -c -- "$1" "$logs/$node.log" 2>/dev/null || true)"
    done | sort | paste -sd ' '
}

# The first live node to log PATTERN from now on (within TIMEOUT seconds), else nothing.
next_to_log() {
    local before now node
    before=" $(count_lines "$1") "
    for _ in $(seq $(( $2 * 10 ))); do
        sleep 0.1
        for node in "${!pids[@]}"; do
            now=$(grep -c -- "$1" "$logs/$node.log" 2>/dev/null || true)
            if [[ $before != *" $node=$now "* ]]; then
                echo "$node"
                return
            fi
        done
    done
}

start=$SECONDS
killed=no
taken_over=no
# Runs for the duration, and on until the kill and the takeover that follows it were shown (a
# slow machine may need longer for the nodes to start), but never more than four times the
# duration.
shown_pending() {
    [[ $killed == no || $taken_over == no ]] \
        && (( kill_after > 0 && SECONDS - start < 4 * duration ))
}
while (( SECONDS - start < duration )) || shown_pending; do
    sleep "$list_every"
    if [[ $killed == no ]] && (( kill_after > 0 && SECONDS - start >= kill_after )); then
        # The node that has just started a run of the 4 s task: killing it now surely cuts
        # that run short (a node picked at a random moment may be finishing its run already).
        victim=$(next_to_log "rebuild-index starts" 30)
        if [[ -n $victim ]]; then
            echo "=== kill -9 $victim while it runs rebuild-index;" \
                 "another node takes it over when the lease (6 s) expires"
            kill -KILL "${pids[$victim]}"
            wait "${pids[$victim]}" 2>/dev/null || true
            unset "pids[$victim]"
            killed=yes
            # Another node retries the lost run as attempt 2 once the lease has expired.
            heir=$(next_to_log "rebuild-index resumes" 60)
            if [[ -n $heir ]]; then
                echo "=== $heir took rebuild-index over from $victim"
                taken_over=yes
            fi
        fi
    fi
    echo "=== dbscheduler list ($(( SECONDS - start )) s)"
    "${dbscheduler[@]}" list
done
echo "=== stopping the nodes (SIGTERM: graceful shutdown)"
