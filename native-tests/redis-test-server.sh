#!/usr/bin/env bash
# The one way tests start a throwaway redis-server (used by native-tests/ and py-tests/).
#
#   redis-test-server.sh DIR PORT [--password PW] [--acl-user NAME:PW] [--unix-socket PATH]
#                                 [--io-threads N] [--conf 'DIRECTIVE ARGS']
#
# Writes DIR/redis.conf (no persistence, never port 6379 unless asked) and execs redis-server,
# so the caller's child process is the server: terminate it to stop the server.
# Secrets go into the config file, never onto the command line where `ps` would show them.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server not found: the tests need Debian's package 'redis-server' (apt-get install -y redis-server)" >&2
    exit 127
fi
[ $# -ge 2 ] || { echo "usage: $0 DIR PORT [options]" >&2; exit 2; }
dir=$1 port=$2
shift 2
conf="$dir/redis.conf"
umask 077
{
    echo "port $port"
    echo "bind 127.0.0.1 -::1"
    echo "dir $dir"
    echo 'save ""'
    echo "appendonly no"
    echo "daemonize no"
    echo "logfile $dir/redis.log"
    echo "protected-mode no"
} >"$conf"
while [ $# -gt 0 ]; do
    case "$1" in
        --password) echo "requirepass $2" >>"$conf"; shift 2 ;;
        --acl-user) echo "user ${2%%:*} on >${2#*:} ~* &* +@all" >>"$conf"; shift 2 ;;
        --unix-socket) printf 'unixsocket %s\nunixsocketperm 700\n' "$2" >>"$conf"; shift 2 ;;
        --io-threads) printf 'io-threads %s\nio-threads-do-reads yes\n' "$2" >>"$conf"; shift 2 ;;
        --conf) printf '%s\n' "$2" >>"$conf"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
exec redis-server "$conf"
