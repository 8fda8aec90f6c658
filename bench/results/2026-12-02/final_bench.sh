#!/bin/bash
# usage: final_bench.sh SECTION...   (sections: ab l2redis l2valkey l2fresh own9 cluster rule replicas failover)
# Logs to $OUT/<section>.log (OUT: default a new temporary folder). Runs from /tmp so `-m lmcache_resp.bench`
# takes the venv's package. The Pythons, from the environment:
#   MAIN     one with lmcache_resp (default: the checkout's .venv, scripts/setup.sh)
#   LMC      one with LMCache 0.5.6 and its C++ connector (default: what scripts/test-lmcache.sh builds)
#   OLD NEW  section ab only: one with the old wheel (89ab430) installed, one with the new
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
OLD=${OLD:-}
NEW=${NEW:-}
case " $* " in *" ab "*) [ -n "$OLD" ] && [ -n "$NEW" ] || { echo "section ab: set OLD and NEW to the Pythons of the two builds" >&2; exit 2; };; esac
MAIN=${MAIN:-$REPO/.venv/bin/python}
OUT=${OUT:-$(mktemp -d)}
echo "logs in $OUT"
cd /tmp
l2() { # label args...
    local label=$1; shift
    echo "### $label: $MAIN -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python $LMC $*"
    /usr/bin/time -f "    (%e s)" $MAIN -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python $LMC "$@" 2>&1
}
for section in "$@"; do
  log=$OUT/$section.log
  echo "== $section $(date -u +%H:%M:%S)" | tee -a $log
  case $section in
  ab)  # #26/#28: old wheel (89ab430) against the new one, ABBA, ratios to LMCache's C++ connector in each run
    for v in OLD NEW NEW OLD; do
      py=${!v}; extra=""; [ $v = NEW ] && extra="--regime fresh"
      echo "### $v plain 4MiBx500" ; $py -m lmcache_resp.bench --chunk-mb 4 --num-keys 500 --rounds 3 --compare lmcache --lmcache-python $LMC $extra 2>&1 | grep -E "^ *(SET|GET|EXISTS)|ours|LMCache|CPU" | head -20
    done
    for v in OLD NEW NEW OLD; do
      py=${!v}; extra=""; [ $v = NEW ] && extra="--regime fresh"
      echo "### $v TLS 4MiBx256" ; $py -m lmcache_resp.bench --tls --chunk-mb 4 --num-keys 256 --rounds 3 --compare redis-py $extra 2>&1 | grep -E "^ *(SET|GET|EXISTS)|ours|redis-py|CPU" | head -20
    done ;;
  l2redis) l2 "redis steady IF1" --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
           l2 "redis steady IF4" --l2-cells 256K,1M,4M --l2-in-flight 4 --rounds 4 --l2-bench-rounds 5 ;;
  l2valkey) l2 "valkey9 steady" --server valkey9 --l2-cells 256K,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
            l2 "valkey8 steady" --server valkey --l2-cells 256K,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10 ;;
  l2fresh) l2 "redis fresh" --regime fresh --l2-cells 256K,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
           l2 "valkey9 fresh" --server valkey9 --regime fresh --l2-cells 32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10 ;;
  cluster) l2 "cluster 3 vs valkey adapter" --cluster 3 --l2-adapters ours,valkey --l2-cells 256K,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10 ;;
  own9) for s in valkey9 redis; do echo "### own bench $s 32MiBx32"; $MAIN -m lmcache_resp.bench --server $s --chunk-mb 32 --num-keys 32 --rounds 4 --compare lmcache --lmcache-python $LMC 2>&1; done ;;
  rule) for s in valkey9 redis valkey; do for st in 1 0; do echo "### piece sweep $s STEADY=$st"; STEADY=$st ROUNDS=3 $MAIN "$REPO/bench/get_piece_sweep.py" $s 1,4,8,32,80 0,1; done; done ;;
  replicas) for args in "" "--replicas 2 --read-from primary" "--replicas 2 --read-from prefer_replica" "--replicas 2 --read-from prefer_replica" "--replicas 2 --read-from primary" ""; do
        echo "### own bench 4MiBx200 $args"; $MAIN -m lmcache_resp.bench --chunk-mb 4 --num-keys 200 --rounds 3 $args 2>&1 | grep -vE "^ *$" | tail -14; done ;;
  failover) for f in kill failover kill failover; do echo "### sentinel failover $f"; $MAIN -m lmcache_resp.bench --sentinel-failover --sentinel-fault $f 2>&1 | tail -14; done ;;
  *) echo "unknown section $section" ;;
  esac 2>&1 | tee -a $log
  echo "== end $section $(date -u +%H:%M:%S)" | tee -a $log
done
