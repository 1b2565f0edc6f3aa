# Sourced by mpi_run.sh and mpi_variants.sh on the GPU machine's host: unpacks
# target/mpipack.tar.xz (bench/distributed/pack_mpipack.sh) and defines T (the
# tcc to start) and mpirun(), with the host's Open MPI when it has one.
[ -d /tmp/mpipack ] || tar xJf target/mpipack.tar.xz -C /tmp
# The host's own Open MPI when it has one (same ABI, libmpi.so.40): tcc then runs
# on the host's loader with only the libraries the host lacks (LLVM's) carried.
if command -v mpirun >/dev/null && ldconfig -p | grep -q "libmpi.so.40 "; then
  mkdir -p /tmp/mpipack/extra
  for l in /tmp/mpipack/lib/*.so*; do
    n=$(basename "$l"); ldconfig -p | grep -q "^\s*$n " || ln -sf "$l" /tmp/mpipack/extra/
  done
  export LD_LIBRARY_PATH=/tmp/mpipack/extra
  T=/tmp/mpipack/tcc
  mpirun() { command mpirun --allow-run-as-root --bind-to "$BIND" "$@"; }
  echo "## the host's Open MPI: $(command mpirun --version | head -1); carried: $(ls /tmp/mpipack/extra | tr '\n' ' ')"
  ldd $T | grep "not found"
fi
# No MPI on the host, or one tcc cannot start with: the carried one, its folders
# at the paths it was built for.
use_carried() {
  cp -a /tmp/mpipack/root/. /
  L="/tmp/mpipack/lib/ld-linux-x86-64.so.2 --library-path /tmp/mpipack/lib"
  printf '#!/bin/sh\nexec %s /tmp/mpipack/tcc "$@"\n' "$L" > /tmp/mpipack/tcc.sh && chmod +x /tmp/mpipack/tcc.sh
  T=/tmp/mpipack/tcc.sh
  mpirun() { $L /tmp/mpipack/orterun --allow-run-as-root --bind-to "$BIND" "$@"; }
  unset LD_LIBRARY_PATH
  echo "## the carried Open MPI"
}
command -v mpirun >/dev/null && ldconfig -p | grep -q "libmpi.so.40 " || use_carried
# Open MPI under gVisor: no cross-memory attach for single copies; windows in
# shared memory (osc sm), made of messages where sm cannot (pt2pt).
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_osc=sm,pt2pt OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1 TCC_NUM_THREADS=1
BIND=${BIND:-core}
echo "## host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(date -u)"
mpirun -np 2 $T --version || { BIND=none; mpirun -np 2 $T --version; } || { use_carried; mpirun -np 2 $T --version; } ||
  { BIND=none; mpirun -np 2 $T --version; } || exit 1
echo "## binding: --bind-to $BIND"
