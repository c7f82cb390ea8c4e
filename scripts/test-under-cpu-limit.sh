#!/usr/bin/env bash
# The test suite inside a control group limited to one CPU's time, as in a container run
# with `--cpus=1` on a larger machine: the process-wide pools keep a worker per CPU, and
# one of them takes work (ThreadPool.cpuLimit). Uses cgroup v1's `cpu` controller, so it
# needs root and the controller at /sys/fs/cgroup/cpu; elsewhere it says so and does
# nothing. Arguments go to scripts/test.sh (CI passes --skip-build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=/sys/fs/cgroup/cpu
if [ "$(id -u)" != 0 ] || [ ! -w "$root/cgroup.procs" ]; then
  echo "test-under-cpu-limit: needs root and the cgroup v1 cpu controller at $root; not run"
  exit 0
fi
group="$root/spindle-test-limit-$$"
mkdir "$group"
# The group goes once its processes have: a test's child may outlive the suite briefly.
trap 'for _ in 1 2 3 4 5; do rmdir "$group" 2>/dev/null && break; sleep 1; done' EXIT
echo 100000 > "$group/cpu.cfs_period_us"
echo 100000 > "$group/cpu.cfs_quota_us"
(echo "$BASHPID" > "$group/cgroup.procs" && exec scripts/test.sh "$@")
