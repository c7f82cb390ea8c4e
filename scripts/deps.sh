#!/usr/bin/env bash
# Installs the system packages Spindle's scripts use, if they are missing. Sourced by
# every other script (and by .ci/run) before anything else; safe to run again (it does
# nothing when everything is present).
#
# Building Spindle needs nothing beyond the Swift toolchain: libnuma is looked up at run
# time (Sources/CSpindle/numa.c). The scripts install its runtime library so that tests
# and benchmarks run with node-local memory wherever the machine has several nodes:
#   libnuma1   NUMA memory placement (optional for Spindle itself)
# and, for scripts/service-bench.sh only (`spindle_ensure_deps wrk`):
#   wrk        the HTTP load generator
# and, for scripts/model-check.sh only (`spindle_ensure_deps spin`):
#   spin       the Promela model checker
spindle_have_lib() {
  # ldconfig's cache, then the usual multiarch directories.
  { command -v ldconfig >/dev/null && grep -q "$1" < <(ldconfig -p 2>/dev/null); } && return 0
  ls /usr/lib/*-linux-gnu/"$1" /usr/lib64/"$1" /usr/lib/"$1" >/dev/null 2>&1
}

spindle_ensure_deps() {
  local missing=()
  spindle_have_lib libnuma.so.1 || missing+=(libnuma1)
  for extra in "$@"; do
    command -v "$extra" >/dev/null || missing+=("$extra")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "spindle: installing ${missing[*]}" >&2
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo=(sudo); else
      echo "spindle: need root or sudo to install ${missing[*]}" >&2; return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >&2
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then spindle_ensure_deps; fi
