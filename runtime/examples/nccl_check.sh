#!/usr/bin/env bash
# Runs the `nccl_check` binary (built elsewhere: the GPU machine has no Rust) next to
# this script on a machine with a GPU and PyTorch's NCCL wheel:
#   cargo build --release -p tcc-runtime --features nccl --example nccl_check
#   cp target/release/examples/nccl_check runtime/examples/nccl_check.sh DIR/
#   cd DIR && OUT=results bash nccl_check.sh
# cudarc loads `libnccl.so`, while the wheel ships `libnccl.so.2`: a link in a temp
# folder bridges that. If this libnccl lacks functions that cudarc's CUDA 13
# bindings load eagerly, a stub library (made with cc) supplies them, returning
# ncclInvalidUsage; tcc never calls them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/out}
mkdir -p "$OUT"
# NVLink multicast off (it can take shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L || true
lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
if [ ! -e "$lib/libnccl.so.2" ]; then
  lib=$(dirname "$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)")
fi
echo "libnccl.so.2 from: $lib"
tmp=$(mktemp -d)
ln -s "$lib/libnccl.so.2" "$tmp/libnccl.so"
missing=$(python3 - "$lib/libnccl.so.2" <<'EOF'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
names = """ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast ncclCommAbort ncclCommCount
ncclCommCuDevice ncclCommDeregister ncclCommDestroy ncclCommFinalize ncclCommGetAsyncError ncclCommInitAll
ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable ncclCommRegister ncclCommShrink ncclCommSplit
ncclCommUserRank ncclCommWindowDeregister ncclCommWindowRegister ncclGather ncclGetErrorString ncclGetLastError
ncclGetUniqueId ncclGetVersion ncclGroupEnd ncclGroupSimulateEnd ncclGroupStart ncclMemAlloc ncclMemFree ncclRecv
ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclReduce ncclReduceScatter ncclResetDebugInit ncclScatter ncclSend""".split()
print(" ".join(n for n in names if not hasattr(lib, n)))
EOF
)
if [ -n "$missing" ]; then
  echo "libnccl lacks: $missing (stubbed)"
  for f in $missing; do echo "int $f(void) { return 5; }"; done > "$tmp/stub.c"
  rm "$tmp/libnccl.so"
  cc -shared -fPIC -o "$tmp/libnccl.so" "$tmp/stub.c" -L"$lib" -Wl,--no-as-needed -l:libnccl.so.2 -Wl,-rpath,"$lib" || echo "cannot build the stub"
fi
export LD_LIBRARY_PATH="$tmp:$lib:${LD_LIBRARY_PATH:-}"
set -o pipefail
"$here/nccl_check" "$OUT" 2>&1 | tee "$OUT/nccl_check.log"
rc=$?
if [ "$rc" = 3 ]; then
  echo "== opening failed: again with NCCL_DEBUG=INFO, loopback bootstrap, no cuMem =="
  NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo NCCL_CUMEM_ENABLE=0 "$here/nccl_check" "$OUT" > "$OUT/nccl_check_retry.log" 2>&1
  rc=$?
  tail -n 60 "$OUT/nccl_check_retry.log"
fi
echo "exit code $rc"
exit $rc
