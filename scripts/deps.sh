#!/usr/bin/env bash
# Installs the system packages Spindle needs, if they are missing. Sourced by the other
# scripts; safe to run again (it does nothing when everything is present).
#   libnuma-dev  NUMA topology and node-local allocation (the engine links libnuma)
spindle_ensure_deps() {
  local missing=()
  [ -f /usr/include/numa.h ] || missing+=(libnuma-dev)
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
