/* OpenBLAS dgemm (numpy's scipy-openblas, 64-bit ints) on row-major contiguous
 * matrices, C[m,n] = A[m,k] B[k,n], timed like call_lib.c: the dgemm side of the
 * issue-18 GETT experiments without Python in the process.
 *
 *   L=$(python3 -c "import numpy, os; print(os.path.join(os.path.dirname(numpy.__file__), '..', 'numpy.libs'))")
 *   cc -O2 -o /tmp/call_dgemm bench/cpu/call_dgemm.c $L/libscipy_openblas64_-*.so -Wl,-rpath,$L
 *   OPENBLAS_NUM_THREADS=2 /tmp/call_dgemm M N K REPS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stdint.h>
extern void scipy_cblas_dgemm64_(int64_t order, int64_t ta, int64_t tb, int64_t m, int64_t n, int64_t k,
    double alpha, const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
static double clock_s(clockid_t id) { struct timespec t; clock_gettime(id, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    long m = atol(argv[1]), n = atol(argv[2]), k = atol(argv[3]); int reps = atoi(argv[4]);
    double *a = malloc(m * k * 8), *b = malloc(k * n * 8), *c = malloc(m * n * 8);
    for (long i = 0; i < m * k; i++) a[i] = (double)(i % 7) * 0.1 - 0.3;
    for (long i = 0; i < k * n; i++) b[i] = (double)(i % 5) * 0.2 - 0.4;
    double flops = 2.0 * m * n * k;
    scipy_cblas_dgemm64_(101, 111, 111, m, n, k, 1.0, a, k, b, n, 0.0, c, n);
    double best = 1e30, best_cpu = 1e30, sum = 0;
    for (int r = 0; r < reps; r++) {
        double w = clock_s(CLOCK_MONOTONIC), p = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        scipy_cblas_dgemm64_(101, 111, 111, m, n, k, 1.0, a, k, b, n, 0.0, c, n);
        double dw = clock_s(CLOCK_MONOTONIC) - w, dp = clock_s(CLOCK_PROCESS_CPUTIME_ID) - p;
        sum += dw; if (dw < best) best = dw; if (dp < best_cpu) best_cpu = dp;
    }
    printf("best %.3f ms (%.1f GF/s) mean %.3f ms, min cpu %.3f ms (%.1f GF/s-cpu)\n", best * 1e3,
           flops / best / 1e9, sum / reps * 1e3, best_cpu * 1e3, flops / best_cpu / 1e9);
    return 0;
}
