#!/bin/bash
# Builds what bench/programs/device_run.sh carries to the GPU machine's host:
# tcc wheels for CPython 3.10-3.12, opt_einsum and threadpoolctl wheels, and the
# extension's shared libraries other than the C library's own.
set -euo pipefail
for v in 3.10 3.11 3.12; do
  maturin build --release -m python/Cargo.toml -o target/wheels --compatibility linux --auditwheel skip -i "python$v"
done
mkdir -p target/pywheels target/pylibs
pip download -q opt_einsum==3.4.0 threadpoolctl --no-deps -d target/pywheels
so=$(python3 -c 'import tcc._native as n; print(n.__file__)')
for l in $(ldd "$so" | awk '/=>/ {print $3}'); do
  case "$(basename "$l")" in libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;; *) cp -L "$l" target/pylibs/ ;; esac
done
strip --strip-unneeded target/pylibs/*.so* 2>/dev/null || true
tar cf - -C target pylibs | xz -T2 -6 > target/pylibs.tar.xz
