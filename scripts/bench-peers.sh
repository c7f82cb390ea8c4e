#!/usr/bin/env bash
# Builds the fork-join case's peers from the benchmark's sources (Benchmarks/peers):
# rayon (Rust, with Debian's librust-rayon-dev and cargo, offline) and oneTBB (C++,
# with libtbb-dev), into Benchmarks/.build/peers, where `bench` looks for them (or set
# SPINDLE_BENCH_PEERS). Installs the packages with apt-get when they are missing. A
# peer that cannot be built is reported and left out; the benchmark runs without it.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
out="$(pwd)/Benchmarks/.build/peers"
mkdir -p "$out"

have_pkg() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
need=()
for p in librust-rayon-dev cargo libtbb-dev g++; do
  command -v dpkg-query >/dev/null && ! have_pkg "$p" && need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "bench-peers: installing ${need[*]}" >&2
  sudo=(); [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq "${need[@]}"; } >&2 ||
    echo "bench-peers: could not install ${need[*]}; the peers that need them are left out" >&2
fi

# rayon: Debian's cargo (its rustc matches the packaged crates), offline against
# /usr/share/cargo/registry (Benchmarks/peers/rayon/.cargo/config.toml).
cargo=/usr/bin/cargo; [ -x "$cargo" ] || cargo=$(command -v cargo || true)
if [ -n "$cargo" ] && ls -d /usr/share/cargo/registry/rayon-1.* >/dev/null 2>&1; then
  if (cd Benchmarks/peers/rayon && CARGO_TARGET_DIR="$out/rayon-target" "$cargo" build --release --offline -q >&2); then
    cp "$out/rayon-target/release/fib-rayon" "$out/fib-rayon"
    echo "bench-peers: rayon built ($out/fib-rayon)" >&2
  else
    echo "bench-peers: rayon did not build; left out" >&2
  fi
else
  echo "bench-peers: no cargo or no librust-rayon-dev; rayon left out" >&2
fi

# oneTBB.
if command -v g++ >/dev/null && [ -e /usr/include/oneapi/tbb/task_group.h ]; then
  if g++ -O2 -std=c++17 Benchmarks/peers/tbb/fib.cpp -o "$out/fib-tbb" -ltbb >&2; then
    echo "bench-peers: oneTBB built ($out/fib-tbb)" >&2
  else
    echo "bench-peers: oneTBB did not build; left out" >&2
  fi
else
  echo "bench-peers: no g++ or no libtbb-dev; oneTBB left out" >&2
fi
exit 0
