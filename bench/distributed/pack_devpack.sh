#!/usr/bin/env bash
# Packs target/release/tcc with the shared libraries it links (libLLVM-14 and
# the rest, the C library and loader included) into target/devpack.tar.xz, for
# bench/distributed/device_run.sh on a host without Rust or LLVM.
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf target/devpack && mkdir -p target/devpack/lib
cp target/release/tcc target/devpack/ && strip target/devpack/tcc
for l in $(ldd target/release/tcc | awk '/=>/ {print $3}') /lib64/ld-linux-x86-64.so.2; do cp -L "$l" target/devpack/lib/; done
strip --strip-unneeded target/devpack/lib/*.so* 2>/dev/null || true
tar cf - -C target devpack | xz -T2 -6 > target/devpack.tar.xz
ls -la target/devpack.tar.xz
