/* Calls one `tcc build` library function of two inputs and one output in a loop
 * and prints its best and mean wall time and its smallest process CPU time per
 * call (issue 18: GETT experiments without Python in the process, so that `perf`
 * and timers see only the library).
 *
 *   cc -O2 -o /tmp/call_lib bench/cpu/call_lib.c -ldl
 *   tcc build g.tc -o /tmp/libg.so
 *   TCC_NUM_THREADS=2 /tmp/call_lib /tmp/libg.so tcc_libg_main LEN_A LEN_B LEN_C REPS FLOPS
 *
 * LEN_* are the arrays' element counts (f64), FLOPS the flops of one call (for
 * the GFLOP/s columns). On the shared 2-core machine the issue-18 measurements
 * ran it under `chrt -f 10` (a few seconds each), so that other jobs did not
 * take the cores in the middle of a call. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*fn)(const double *, size_t, const double *, size_t, double *, size_t);

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s LIB FUNC LEN_A LEN_B LEN_C REPS FLOPS\n", argv[0]);
        return 1;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    fn f = (fn)dlsym(h, argv[2]);
    if (!f) {
        fprintf(stderr, "no function %s in %s\n", argv[2], argv[1]);
        return 1;
    }
    size_t na = strtoul(argv[3], 0, 10), nb = strtoul(argv[4], 0, 10), nc = strtoul(argv[5], 0, 10);
    int reps = atoi(argv[6]);
    double flops = atof(argv[7]);
    double *a = malloc(na * 8), *b = malloc(nb * 8), *c = malloc(nc * 8);
    if (!a || !b || !c || reps < 1) {
        fprintf(stderr, "bad sizes or REPS\n");
        return 1;
    }
    for (size_t i = 0; i < na; i++) a[i] = (double)(i % 7) * 0.1 - 0.3;
    for (size_t i = 0; i < nb; i++) b[i] = (double)(i % 5) * 0.2 - 0.4;
    if (f(a, na, b, nb, c, nc)) {
        fprintf(stderr, "%s returned an error\n", argv[2]);
        return 2;
    }
    double best = 1e30, best_cpu = 1e30, sum = 0;
    for (int r = 0; r < reps; r++) {
        double w = clock_s(CLOCK_MONOTONIC), p = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (f(a, na, b, nb, c, nc)) return 2;
        double dw = clock_s(CLOCK_MONOTONIC) - w, dp = clock_s(CLOCK_PROCESS_CPUTIME_ID) - p;
        sum += dw;
        if (dw < best) best = dw;
        if (dp < best_cpu) best_cpu = dp;
    }
    printf("best %.3f ms (%.1f GF/s) mean %.3f ms, min cpu %.3f ms (%.1f GF/s-cpu)\n", best * 1e3,
           flops / best / 1e9, sum / reps * 1e3, best_cpu * 1e3, flops / best_cpu / 1e9);
    return 0;
}
