#!/bin/bash
# Disk full mid-sweep (issue 30): N runs of the issue's command with --out on a small tmpfs
# (needs root for the mount): bench/fault_diskfull.sh N SIZE, e.g. 20 2m or 20 12m.
# Prints each run's exit status, wall seconds, stderr lines and processes left.
set -u
n=${1:-20}; size=${2:-2m}; dir=/tmp/phaze_fault_small
mkdir -p $dir; mountpoint -q $dir || mount -t tmpfs -o size=$size tmpfs $dir
mount -o remount,size=$size $dir
cd "$(dirname "$0")/.."
for i in $(seq 1 $n); do
  rm -f $dir/*; s=$(date +%s.%N)
  PYTHONPATH=$PWD timeout 60 python3 -m phaze search --model bert-large --devices 8 \
    --space-every 10 --global-batch 64 --no-baselines --workers 2 --out $dir/r.csv \
    >/dev/null 2>/tmp/phaze_fault_err.txt
  rc=$?; e=$(date +%s.%N)
  echo "run $i rc=$rc t=$(printf %.2f $(echo "$e-$s" | bc)) lines=$(wc -l </tmp/phaze_fault_err.txt) left=$(pgrep -f "$dir" | wc -l)"
done
