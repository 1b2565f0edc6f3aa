/* Calls the GPU shim of bench/gpu/complex_zg.tc (`tcc build --target cuda
 * complex_zg.tc -o zg.ptx` writes zg.c + zg.h) from C with interleaved complex
 * arrays: reads the inputs numpy wrote (DIR/A.bin ..., raw little-endian,
 * complex128 / complex64 / float64), calls tcc_cuda_main, writes DIR/C.bin and
 * DIR/D.bin for complex_check.py to compare with numpy; then checks that a wrong
 * length, a NULL argument and an output overlapping an input are refused with
 * their codes and messages naming the source tensors; prints the time of a
 * call (best of 3, copies and the host split included).
 * Build: gcc -O2 -std=gnu99 complex_driver.c zg.c -I. -I$CUDA/include -lcublas -lcuda -lpthread */
#include "zg.h"
#include <complex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 384, K = 256, M = 320 };

static void* load(const char* dir, const char* name, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE* f = fopen(path, "rb");
    void* p = malloc(bytes);
    if (!f || !p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot read %zu bytes of %s\n", bytes, path);
        exit(2);
    }
    fclose(f);
    return p;
}

static void save(const char* dir, const char* name, const void* p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

static int expect(const char* what, int rc, int want, const char* text) {
    const char* e = tcc_cuda_last_error();
    int ok = rc == want && e != NULL && strstr(e, text) != NULL;
    printf("%s %s: rc %d (want %d), \"%s\"\n", ok ? "ok  " : "FAIL", what, rc, want, e ? e : "(null)");
    return ok;
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : ".";
    double _Complex* A = load(dir, "A", sizeof(double _Complex) * N * K);
    double _Complex* B = load(dir, "B", sizeof(double _Complex) * K * M);
    double* R = load(dir, "R", sizeof(double) * N * M);
    float _Complex* S = load(dir, "S", sizeof(float _Complex) * N * K);
    float _Complex* T = load(dir, "T", sizeof(float _Complex) * K * M);
    double _Complex* C = calloc((size_t)N * M, sizeof *C);
    float _Complex* D = calloc((size_t)N * M, sizeof *D);
    if (!C || !D) return 2;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = tcc_cuda_main(A, N * K, B, K * M, R, N * M, S, N * K, T, K * M, C, N * M, D, N * M);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc != TCC_OK) {
            printf("FAIL tcc_cuda_main: rc %d: %s\n", rc, tcc_cuda_last_error());
            return 1;
        }
        double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
        best = s < best ? s : best;
    }
    printf("tcc_cuda_main: best of 3 %.3f ms (host arrays in and out)\n", best * 1e3);
    save(dir, "C", C, sizeof(double _Complex) * N * M);
    save(dir, "D", D, sizeof(float _Complex) * N * M);
    int ok = 1;
    ok &= expect("wrong length", tcc_cuda_main(A, N * K - 1, B, K * M, R, N * M, S, N * K, T, K * M, C, N * M, D, N * M),
                 TCC_ERR_LENGTH, "`A` must have");
    ok &= expect("NULL", tcc_cuda_main(A, N * K, NULL, K * M, R, N * M, S, N * K, T, K * M, C, N * M, D, N * M),
                 TCC_ERR_NULL, "`B` is NULL");
    ok &= expect("overlap", tcc_cuda_main(A, N * K, B, K * M, R, N * M, S, N * K, T, K * M, C, N * M, (float _Complex*)C, N * M),
                 TCC_ERR_OVERLAP, "overlaps");
    return ok ? 0 : 1;
}
