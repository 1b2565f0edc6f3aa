# Sourced (bash) by the device scripts of bench/gpu/: puts on LD_LIBRARY_PATH
# LLVM's libraries carried for tcc-gpu (it links libLLVM-14, which the device
# lacks; LLVMLIBS_DIR, default /tmp/llvmlibs, where target/llvmlibs.tar.xz
# unpacks) and every folder that holds libcublas: the CUDA toolkit's, or the
# nvidia-* pip packages' that torch brings along.
CUBLAS_DIRS=$(python3 - <<'PY'
import glob, os, site
dirs = set()
for pat in ["/usr/local/cuda*/lib64/libcublas.so*", "/usr/local/cuda*/targets/*/lib/libcublas.so*"] + [p + "/nvidia/**/libcublas.so*" for p in site.getsitepackages()]:
    for f in glob.glob(pat, recursive=True):
        dirs.add(os.path.dirname(f))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH=${LLVMLIBS_DIR:-/tmp/llvmlibs}:${CUBLAS_DIRS}:${LD_LIBRARY_PATH:-}
