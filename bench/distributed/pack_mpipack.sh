#!/usr/bin/env bash
# Packs an MPI build of tcc (cargo build --release --features mpi --bin tcc)
# with this machine's Open MPI (Debian 12's 4.1.4: orterun, its components,
# PMIx, help files) and every shared library they load, the C library and the
# loader included, into target/mpipack.tar.xz: the GPU machine's host has no
# MPI. bench/distributed/mpi_run.sh unpacks it there: Open MPI's own folders go
# to the absolute paths it was built for (nothing the host has lives there), the
# libraries to /tmp/mpipack/lib, and every program runs through the packed
# loader so that no host program loads a packed library.
set -euo pipefail
cd "$(dirname "$0")/../.."
P=target/mpipack
rm -rf "$P" && mkdir -p "$P/lib" "$P/root"
cp target/release/tcc "$P/tcc" && strip "$P/tcc"
ldd target/release/tcc | grep -q libmpi || { echo "target/release/tcc is not an MPI build" >&2; exit 1; }
ML=/usr/lib/x86_64-linux-gnu
# Open MPI's folders at their own paths; components that need fabrics the host
# lacks (UCX, libfabric, PSM, verbs) are left out rather than failing to load.
for d in $ML/openmpi $ML/pmix2 /usr/share/openmpi /etc/openmpi; do
  mkdir -p "$P/root$(dirname $d)" && cp -a "$d" "$P/root$d"
done
rm -rf "$P/root$ML/openmpi/include" "$P/root$ML/openmpi/lib/pkgconfig"
find "$P/root" \( -name '*ucx*' -o -name '*ofi*' -o -name '*psm*' -o -name '*openib*' -o -name '*verbs*' -o -name '*java*' \) -prune -exec rm -rf {} +
cp /usr/bin/orterun "$P/orterun"
# Every library the programs and the components load.
objs="target/release/tcc /usr/bin/orterun $(find "$P/root" -name '*.so*' -type f)"
for o in $objs; do ldd "$o" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}'; done | sort -u |
  while read -r l; do cp -L "$l" "$P/lib/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$P/lib/"
strip --strip-unneeded "$P"/lib/*.so* 2>/dev/null || true
tar cf - -C target mpipack | xz -T2 -6 > target/mpipack.tar.xz
ls -la target/mpipack.tar.xz
