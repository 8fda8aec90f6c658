#!/usr/bin/env bash
# The one way tests start a throwaway Redis Cluster (used by native-tests/ and py-tests/).
#
#   redis-test-cluster.sh DIR BASEPORT PRIMARIES [--replicas N] [--password PW] [--owner PID]
#   redis-test-cluster.sh stop DIR
#
# Starts PRIMARIES * (1 + N) redis-servers on 127.0.0.1, ports BASEPORT, BASEPORT+1, ...
# (each also uses port+10000 for the cluster bus), joins them with `redis-cli --cluster create`,
# and waits until every node reports cluster_state:ok, all 16384 slots assigned and ok, every
# node known to every other, and every replica's link to its primary up. Then it exits 0 and the
# servers keep running in the background.
#
# DIR/pids lists "PORT PID" per server, primaries first as `--cluster create` assigns them.
# `stop DIR` (or killing those pids) ends them. With `--owner PID`, a watcher also ends them once
# that process is gone, so a test run that dies without cleaning up leaves no servers behind.
#
# The password may come from the environment variable REDIS_TEST_CLUSTER_PASSWORD instead of
# --password, which keeps it off this script's own command line as well (the harnesses do so).
#
# Exit status: 0 ready, 2 usage, 98 a port was taken (pick another BASEPORT and retry),
# 127 redis-server/redis-cli missing, 1 anything else (the failing node's log is printed).
#
# Secrets go into config files and the REDISCLI_AUTH environment variable, never onto a command
# line where `ps` would show them. The cluster-node-timeout is short so failover tests are fast.
set -euo pipefail

usage() {
    echo "usage: $0 DIR BASEPORT PRIMARIES [--replicas N] [--password PW] [--owner PID]" >&2
    echo "       $0 stop DIR" >&2
    echo "       (internal: $0 watch DIR OWNER)" >&2
    exit 2
}

# Only pids that still run redis-server: a pid file outliving its servers must not make us
# signal whatever process got the pid next.
redis_pids() {
    local pidfile=$1/pids port pid cmdline
    [ -f "$pidfile" ] || return 0
    while read -r port pid; do
        # Not `| grep -q`: under pipefail, grep quitting early can fail the pipeline.
        cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
        case "$cmdline" in *redis-server*) echo "$pid" ;; esac
    done <"$pidfile"
}

# A process that has exited: gone, or a zombie waiting to be reaped whose other threads are gone
# too. Only then are its sockets closed: the main thread of a killed redis-server turns zombie
# while its I/O and background threads, which share its file table, may still be exiting.
exited() {
    local stat tasks
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
    stat=${stat##*) }
    tasks=("/proc/$1/task/"*)
    [ "${stat:0:1}" = Z ] && [ "${#tasks[@]}" -le 1 ]
}

# SIGKILL, then wait until they have exited: callers reuse the ports right away.
stop_cluster() {
    local pids pid tries
    pids=$(redis_pids "$1")
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086 # one word per pid
    kill -KILL $pids 2>/dev/null || true
    for pid in $pids; do
        tries=0
        until exited "$pid"; do
            tries=$((tries + 1))
            [ $tries -lt 500 ] || { echo "redis-server $pid did not exit within 5 s of SIGKILL" >&2; return 1; }
            sleep 0.01
        done
    done
}

if [ "${1:-}" = stop ]; then
    [ $# -eq 2 ] || usage
    stop_cluster "$2"
    exit 0
fi

# Stops the cluster in DIR once OWNER has exited; returns early once the servers are gone.
# Started by a run with --owner as a process of its own, so that its command line, which lasts
# as long as the cluster, holds no password.
if [ "${1:-}" = watch ]; then
    [ $# -eq 3 ] || usage
    dir=$2 owner=$3
    mapfile -t watched < <(redis_pids "$dir")
    # Builtins only in the loop: it runs for the cluster's whole life, on shared CI machines.
    alive() {
        local pid
        for pid in "${watched[@]}"; do kill -0 "$pid" 2>/dev/null && return 0; done
        return 1
    }
    while kill -0 "$owner" 2>/dev/null && alive; do sleep 1; done
    stop_cluster "$dir"
    exit 0
fi

for tool in redis-server redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$tool not found: the cluster tests need Debian's packages 'redis-server' and 'redis-tools'" >&2
        exit 127
    fi
done
[ $# -ge 3 ] || usage
dir=$1 baseport=$2 primaries=$3
shift 3
replicas=0 password=${REDIS_TEST_CLUSTER_PASSWORD:-} owner=""
while [ $# -gt 0 ]; do
    case "$1" in
        --replicas) replicas=$2; shift 2 ;;
        --password) password=$2; shift 2 ;;
        --owner) owner=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; usage ;;
    esac
done
case "$baseport$primaries$replicas" in *[!0-9]*) usage ;; esac
# `--cluster create` refuses fewer than three primaries.
[ "$primaries" -ge 3 ] || { echo "a cluster needs at least 3 primaries" >&2; exit 2; }
total=$((primaries * (1 + replicas)))
last=$((baseport + total - 1))
if [ "$baseport" -lt 1024 ] || [ $((last + 10000)) -gt 65535 ]; then
    echo "ports $baseport..$last and their bus ports (+10000) must lie in 1024..65535" >&2
    exit 2
fi
if [ "$baseport" -le 6379 ] && [ "$last" -ge 6379 ]; then
    echo "refusing to use port 6379: a developer's own redis may live there" >&2
    exit 2
fi

umask 077
mkdir -p "$dir"
# A rerun in the same DIR replaces the cluster, rather than orphaning servers the pid file named.
stop_cluster "$dir"
: >"$dir/pids"
if [ -n "$password" ]; then
    export REDISCLI_AUTH=$password
    # A double-quoted config string, so spaces, quotes and `#` in the password survive.
    quoted_password=${password//\\/\\\\}
    quoted_password=${quoted_password//\"/\\\"}
    quoted_password=${quoted_password//$'\n'/\\n}
    quoted_password="\"$quoted_password\""
fi

cli() {
    local port=$1
    shift
    redis-cli -h 127.0.0.1 -p "$port" --no-auth-warning "$@"
}

# One reply's lines without the CRs, for `grep -qx <<<`. Callers capture it rather than pipe it:
# under pipefail, grep -q quitting early could fail a pipeline by SIGPIPE.
reply_lines() {
    local out
    out=$(cli "$@" 2>/dev/null) || return 1
    printf '%s\n' "${out//$'\r'/}"
}

fail() {
    echo "$1" >&2
    stop_cluster "$dir"
    exit "${2:-1}"
}

ports=() pids=()
for ((port = baseport; port <= last; port++)); do
    node="$dir/$port"
    mkdir -p "$node"
    rm -f "$node/nodes.conf" "$node/redis.log" "$node/stderr.log"
    {
        echo "port $port"
        echo "bind 127.0.0.1"
        echo "dir $node"
        echo 'save ""'
        echo "appendonly no"
        echo "daemonize no"
        echo "logfile $node/redis.log"
        echo "protected-mode no"
        echo "cluster-enabled yes"
        echo "cluster-config-file nodes.conf"
        echo "cluster-node-timeout 1000"
        echo "cluster-allow-replica-migration yes"
        # Fail over even when the replica's link was down a while: tests kill primaries at will.
        echo "cluster-replica-validity-factor 0"
        # Replicas sync right away instead of waiting for more replicas to batch with.
        echo "repl-diskless-sync yes"
        echo "repl-diskless-sync-delay 0"
        if [ -n "$password" ]; then
            echo "requirepass $quoted_password"
            echo "masterauth $quoted_password"
        fi
    } >"$node/redis.conf"
    # Not the caller's pipes: a caller reading this script's output to the end would otherwise
    # wait for the servers to exit. Config errors go to stderr, before the log file is opened.
    redis-server "$node/redis.conf" </dev/null >/dev/null 2>"$node/stderr.log" &
    echo "$port $!" >>"$dir/pids"
    ports+=("$port")
    pids+=("$!")
done

deadline=$((SECONDS + 10))
for ((i = 0; i < total; i++)); do
    port=${ports[$i]} pid=${pids[$i]}
    # Asking for the process id, not just PING: another test's server may hold this port, and
    # would answer PING while ours is still starting (and about to fail to bind).
    until info=$(reply_lines "$port" INFO server) && grep -qx "process_id:$pid" <<<"$info"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log=$(cat "$dir/$port/stderr.log" "$dir/$port/redis.log" 2>/dev/null || true)
            case "$log" in
                *"Address already in use"*) fail "port $port or $((port + 10000)) is taken" 98 ;;
                *) fail "redis-server on port $port exited:"$'\n'"$log" ;;
            esac
        fi
        [ $SECONDS -lt $deadline ] || fail "redis-server on port $port did not answer within 10 s"
        sleep 0.05
    done
done

# Only now that every server runs (has exec'd redis-server) can the watcher recognize them.
if [ -n "$owner" ]; then
    bash "$0" watch "$dir" "$owner" </dev/null >/dev/null 2>&1 &
    disown
fi

addresses=()
for port in "${ports[@]}"; do addresses+=("127.0.0.1:$port"); done
if ! out=$(redis-cli --no-auth-warning --cluster create "${addresses[@]}" --cluster-replicas "$replicas" \
    --cluster-yes 2>&1); then
    fail "redis-cli --cluster create failed:"$'\n'"$out"
fi

# `--cluster create` makes the first PRIMARIES addresses the primaries. Checked, not assumed:
# callers rely on the pid file's order.
for ((i = 0; i < total; i++)); do
    port=${ports[$i]}
    want=master
    [ "$i" -lt "$primaries" ] || want=slave
    role=$(reply_lines "$port" ROLE) || fail "ROLE failed on node $port"
    role=${role%%$'\n'*}
    [ "$role" = "$want" ] || fail "node $port is a $role, expected a $want"
done

ready() {
    local port info
    for port in "${ports[@]}"; do
        info=$(reply_lines "$port" CLUSTER INFO) || return 1
        grep -qx 'cluster_state:ok' <<<"$info" || return 1
        grep -qx 'cluster_slots_assigned:16384' <<<"$info" || return 1
        grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
        grep -qx "cluster_known_nodes:$total" <<<"$info" || return 1
    done
    for port in "${ports[@]:$primaries}"; do
        info=$(reply_lines "$port" INFO replication) || return 1
        grep -qx 'master_link_status:up' <<<"$info" || return 1
    done
}

deadline=$((SECONDS + 20))
until ready; do
    [ $SECONDS -lt $deadline ] || fail "the cluster on ports $baseport..$last did not become ready within 20 s"
    sleep 0.1
done
