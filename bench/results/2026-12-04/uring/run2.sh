#!/bin/bash
# The second quiet run (redis 7.0 steady), after the low-water mark came to the ring's receives:
# ABBA x4 of 256 KiB x 32 GET and SET and 4 MiB x 32 GET, system calls per batch of 256 KiB x 32
# GET, and perf record of the two loops over 256 KiB x 32 SET batches (where the time goes).
cd "$(dirname "$0")"
./abba.sh redis steady get 32 262144 300 4
./abba.sh redis steady set 32 262144 300 4
./abba.sh redis steady get 32 4194304 30 3
./syscalls.sh redis get 32 262144
./perf.sh
