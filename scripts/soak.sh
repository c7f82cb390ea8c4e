#!/usr/bin/env bash
# Runs everything Spindle does at once for MINUTES (default 1): random operation DAGs
# across queues with cancellation, suspension, width and priority churn; direct
# submits; fork-join and parallel loops; async offload, tasks on a pool and an actor;
# pools made and shut down; blocking work that brings spare workers. It samples the
# process's resident memory, threads and open descriptors once a second, and passes
# when no item was lost or run twice, memory and descriptors stay flat after the
# warm-up, and Spindle's threads with no work at the end are no more than with no work
# after the warm-up, when the drivers pause while they are counted (Benchmarks/soak).
# Extra arguments go to the soak: --plot FILE.svg draws the samples, --output FILE.csv
# keeps them, --seed, --drivers, --rss-limit.
#
#   scripts/soak.sh 1                                   what CI runs
#   scripts/soak.sh 30 --plot docs/soak.svg             the long run in docs/
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps
minutes=${1:-1}
[ $# -gt 0 ] && shift
swift build -c release --package-path Benchmarks --product soak >&2
exec "$(swift build -c release --package-path Benchmarks --show-bin-path)/soak" --minutes "$minutes" "$@"
