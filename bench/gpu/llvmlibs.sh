#!/bin/sh
# Packs the shared libraries tcc-gpu links that the GPU machine lacks (LLVM 14
# and what it pulls in; not libc, libstdc++, libz or liblzma, which the device
# has and torch needs in its own versions) into target/llvmlibs.tar.xz, which
# unpacks to /tmp/llvmlibs, where bench/gpu/cuda_env.sh looks for them.
#   sh bench/gpu/llvmlibs.sh     (after cargo build --release --features cuda --bin tcc-gpu)
set -e
BIN=${1:-target/release/tcc-gpu}
rm -rf target/llvmlibs && mkdir -p target/llvmlibs
ldd "$BIN" | awk '/=> \// {print $1, $3}' | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libgcc_s*|libpthread*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libz.so*|liblzma*) ;;
    *) cp -L "$path" "target/llvmlibs/$name" ;;
  esac
done
ls target/llvmlibs
tar cf - -C target llvmlibs | xz -T2 -6 > target/llvmlibs.tar.xz
du -sh target/llvmlibs.tar.xz
