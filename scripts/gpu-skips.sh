#!/usr/bin/env bash
# Judges the skipped GPU tests of a run against the machine it ran on.
#
#   scripts/gpu-skips.sh GPUS LOG...
#
# GPUS is how many GPUs the machine has (scripts/gpu-run.sh counts the lines of
# `nvidia-smi -L`), or `unknown`. A GPU test that cannot run on too few GPUs
# prints `SKIPPED <test>: needs <N> GPUs, <M> visible` (tuner/tests/gpu_common/
# skip.rs), usually after libtest's `test <test> ... `. Each such line is listed
# as `  <log>: <test>: needs N GPUs, M visible; this machine has GPUS`.
#
# Exits 1 when a test was skipped that this machine could have run (it has N
# GPUs or more: the test saw fewer, e.g. through CUDA_VISIBLE_DEVICES), when
# the machine's GPUs are unknown and a test was skipped, or when a line names
# SKIPPED in another form (it cannot be judged); 0 otherwise; 2 on bad arguments.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: scripts/gpu-skips.sh GPUS LOG..." >&2
  exit 2
fi
gpus=$1
shift
case "$gpus" in
  unknown) ;;
  '' | *[!0-9]*)
    echo "gpu-skips: GPUS is a number of GPUs or \`unknown\`, not '$gpus'" >&2
    exit 2 ;;
esac

status=0
for log in "$@"; do
  if [ ! -r "$log" ]; then
    echo "gpu-skips: cannot read $log" >&2
    exit 2
  fi
  name=$(basename "$log" .log)
  while IFS= read -r line; do
    rest=${line#*SKIPPED}
    if [[ $rest =~ ^\ ([A-Za-z0-9_]+):\ needs\ ([0-9]+)\ GPUs,\ ([0-9]+)\ visible[[:space:]]*$ ]]; then
      test=${BASH_REMATCH[1]} needs=${BASH_REMATCH[2]} visible=${BASH_REMATCH[3]}
      said="  $name: $test: needs $needs GPUs, $visible visible; this machine has $gpus"
      if [ "$gpus" = unknown ]; then
        echo "$said: FAIL (cannot tell whether it could have run here)"
        status=1
      elif [ "$gpus" -ge "$needs" ]; then
        echo "$said: FAIL (it could have run here)"
        status=1
      else
        echo "$said"
      fi
    else
      echo "  $name: FAIL (a SKIPPED line in no known form): $line"
      status=1
    fi
  done < <(grep -a 'SKIPPED' "$log")
done
exit $status
