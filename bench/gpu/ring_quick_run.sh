#!/bin/bash
# A short version of ring_device_run.sh (issue 19; about 2 minutes): the ring's
# checks (random programs and small triples, against the interpreter), then
# key cases of the suite with the double buffer and rings of 4 and 6 (best
# of 5), from the folder bench/gpu/ring_prepare.sh fills:
#   tar xJf llvmlibs.tar.xz -C /tmp && tar xJf ring19.tar.xz -C /tmp && bash /tmp/ring19/ring_quick_run.sh
cd "$(dirname "$0")"; . ./cuda_env.sh; chmod +x tcc-gpu
nvidia-smi -L
ms() { grep -oE "time = [0-9.]+ ms" | head -1 | grep -oE "[0-9.]+"; }
for d in checks/0 checks/2 checks/4; do
  for s in random small; do
    fs=$(for p in $d/*.ptx; do b=$(basename $p .ptx); [ -f src/$s/$b.tc ] && echo src/$s/$b.tc; done)
    r=$(timeout 40 ./tcc-gpu $fs --ptx-dir $d --gpu-gemm tiled --check --keep-going 2>&1)
    echo "$d ($(cat $d/shape)) $s: $(echo "$fs" | wc -w) programs, $(echo "$r" | grep -cE "^FAIL") FAIL; last: $(echo "$r" | tail -1 | cut -c1-100)"
  done
done
for c in 5 11 4 24 27 23; do
  line="cc$c | auto $(timeout 20 ./tcc-gpu cc/cc$c.tc --repeat 5 2>&1 | ms)"
  for d in t0 t2 t3 t4 t5 t8 t9 t10 t11 t12; do [ -f $d/cc$c.tc ] && line="$line | $(cat $d/shape) $(timeout 20 ./tcc-gpu $d/cc$c.tc --repeat 5 --gpu-gemm tiled 2>&1 | ms)"; done
  echo "$line"
  [ $SECONDS -gt 130 ] && break
done
echo "total $SECONDS s"
