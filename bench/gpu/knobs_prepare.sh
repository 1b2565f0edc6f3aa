#!/bin/sh
# Issue 19: the tiled kernels' store side on the CCSD(T) triples (store-bound
# at 1.44-1.58x the write roofline on an H200). Builds the suite's triples and
# a few others with the cost model's plans under each variant of the knobs
#   TCC_GPU_EPILOGUE=whole   the C tile staged in one pass (one barrier)
#   TCC_GPU_STORE_CS=1|0     evict-first (st.global.cs) vector stores of C
#                            (since 9efad6b the default where C is larger than L2:
#                            base and the others say 0 to measure what they did then)
#   TCC_GPU_MIN_BLOCKS=N     ptxas sized for N resident blocks per SM
#   TCC_GPU_STAGES=N         ring of N operand buffers
#   TCC_GPU_TILE=...         other tensor-core block shapes (8 warps)
# (VARIANTS: name:ENV=value+ENV=value ...) into DEST (default target/knobs19) + DEST.tar.xz, for knobs_run.sh:
#   v/<name>/      the cases under variant <name> (its env in v/<name>/env)
#   checks/<name>/ random programs and small triples under it (interpreter checks)
set -e
TCC=${TCC:-target/release/tcc}
DEST=${1:-target/knobs19}
CASES=${CASES:-"1 4 5 10 11 16 22"}
VARIANTS=${VARIANTS:-"base:TCC_GPU_STORE_CS=0 whole:TCC_GPU_EPILOGUE=whole+TCC_GPU_STORE_CS=0 cs:TCC_GPU_STORE_CS=1 whole_cs:TCC_GPU_EPILOGUE=whole+TCC_GPU_STORE_CS=1 min6:TCC_GPU_MIN_BLOCKS=6+TCC_GPU_STORE_CS=0 min8:TCC_GPU_MIN_BLOCKS=8+TCC_GPU_STORE_CS=0 whole_min5:TCC_GPU_EPILOGUE=whole+TCC_GPU_MIN_BLOCKS=5+TCC_GPU_STORE_CS=0 s6:TCC_GPU_STAGES=6+TCC_GPU_STORE_CS=0 whole_cs_s6:TCC_GPU_EPILOGUE=whole+TCC_GPU_STORE_CS=1+TCC_GPU_STAGES=6 s3:TCC_GPU_STAGES=3+TCC_GPU_STORE_CS=0 t128x64:TCC_GPU_TILE=128,64,4,32,32,mma,s4+TCC_GPU_STORE_CS=0 t128x64cs:TCC_GPU_TILE=128,64,4,32,32,mma,s4+TCC_GPU_STORE_CS=1 t64x128:TCC_GPU_TILE=64,128,4,32,32,mma,s4+TCC_GPU_STORE_CS=0"}
CHECKED=${CHECKED:-"whole_cs min6 whole_cs_s6"}
rm -rf "$DEST" && mkdir -p "$DEST/src/random" "$DEST/src/small" "$DEST/cc"
python3 bench/gpu/cc_suite.py build --dir "$DEST/cc" --tcc "$TCC" 2>/dev/null
python3 bench/gpu/cc_suite.py small --dir "$DEST/src/small"
cp bench/gpu/random/*.tc "$DEST/src/random/"
for v in $VARIANTS; do
  name=${v%%:*}; envs=$(echo "${v#*:}" | tr '+' ' ')
  d="$DEST/v/$name"; mkdir -p "$d"; echo "$envs" > "$d/env"
  for c in $CASES; do
    cp "$DEST/cc/cc$c.tc" "$d/"
    env $envs $TCC build --target cuda "$d/cc$c.tc" -o "$d/cc$c.ptx" > /dev/null 2>&1 || rm -f "$d/cc$c.tc"
  done
  case " $CHECKED " in *" $name "*)
    mkdir -p "$DEST/checks/$name"
    for f in "$DEST"/src/random/*.tc "$DEST"/src/small/*.tc; do
      env $envs $TCC build --target cuda "$f" -o "$DEST/checks/$name/$(basename "$f" .tc).ptx" > /dev/null 2>&1 || true
    done;;
  esac
done
# The whole suite under each variant the cost model's plans can take (SUITE:
# not the forced block shapes), for the suite run with the sweep's best.
for v in $VARIANTS; do
  name=${v%%:*}; envs=$(echo "${v#*:}" | tr '+' ' ')
  case " ${SUITE:-base whole cs whole_cs min6 s6 whole_cs_s6} " in *" $name "*)
    env $envs python3 bench/gpu/cc_suite.py build --dir "$DEST/suite/$name" --tcc "$TCC" > /dev/null 2>&1;;
  esac
done
cp target/release/tcc-gpu bench/gpu/knobs_run.sh bench/gpu/knobs_pick.py bench/gpu/cc_suite.py bench/gpu/cc_device_run.sh bench/gpu/cuda_env.sh "$DEST/"
tar cf - -C "$(dirname "$DEST")" "$(basename "$DEST")" | xz -T2 -3 > "$DEST.tar.xz"
du -sh "$DEST.tar.xz"
