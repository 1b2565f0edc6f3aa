/* The C ABI, used from C: tile tasks on a pool, collectives on in-process ranks,
 * and a failing rank. Prints "ok" and exits 0 when every check passes. */
#include "tcc_runtime.h"
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "check failed: %s (line %d)\n", #c, __LINE__); return 1; } } while (0)

static atomic_int hits[6][7];

static int mark(void *ctx, const size_t *lo, const size_t *hi, size_t worker) {
    (void)ctx; (void)worker;
    for (size_t i = lo[0]; i < hi[0]; i++)
        for (size_t j = lo[1]; j < hi[1]; j++) atomic_fetch_add(&hits[i][j], 1);
    return 0;
}

static int fail_on_big(void *ctx, const size_t *lo, const size_t *hi, size_t worker) {
    (void)ctx; (void)hi; (void)worker;
    return lo[0] >= 4 ? 1 : 0;
}

static int ranks_ok(void *ctx, tcc_comm *comm) {
    (void)ctx;
    int r = tcc_comm_rank(comm), p = tcc_comm_size(comm);
    double x[2] = {(double)r, 1.0};
    if (tcc_comm_allreduce(comm, x, 2, TCC_OP_SUM) != TCC_OK) return 10;
    if (x[0] != p * (p - 1) / 2.0 || x[1] != (double)p) return 11;
    double b[3] = {0, 0, 0};
    if (r == p - 1) { b[0] = 4; b[1] = 5; b[2] = 6; }
    if (tcc_comm_broadcast(comm, b, 3, p - 1) != TCC_OK) return 12;
    if (b[0] != 4 || b[2] != 6) return 13;
    double g[16];
    double mine = 10.0 * r;
    if (tcc_comm_allgather(comm, &mine, 1, g) != TCC_OK) return 14;
    for (int q = 0; q < p; q++) if (g[q] != 10.0 * q) return 15;
    uint64_t words = 0, msgs = 0;
    tcc_comm_stats(comm, &words, &msgs);
    if (msgs == 0 && p > 1) return 16;
    return 0;
}

static atomic_int aborted;

static int rank_fails(void *ctx, tcc_comm *comm) {
    (void)ctx;
    if (tcc_comm_rank(comm) == 1) return 7; /* rank 1 gives up */
    double x = 1.0;
    int rc = tcc_comm_allreduce(comm, &x, 1, TCC_OP_SUM);
    if (rc == TCC_ERR_ABORTED) atomic_fetch_add(&aborted, 1);
    return rc == TCC_OK ? 0 : 1;
}

int main(void) {
    CHECK(strcmp(tcc_runtime_version(), "0.1.0") == 0);
    tcc_pool *pool = tcc_pool_new(3);
    CHECK(pool != NULL);
    size_t ext[2] = {6, 7}, tile[2] = {4, 3};
    for (int sched = 0; sched < 2; sched++) {
        memset(hits, 0, sizeof hits);
        CHECK(tcc_pool_for_tiles(pool, 2, ext, tile, sched, mark, NULL) == TCC_OK);
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 7; j++) CHECK(atomic_load(&hits[i][j]) == 1);
    }
    CHECK(tcc_pool_for_tiles(pool, 2, ext, tile, 1, fail_on_big, NULL) == TCC_ERR_FAILED);
    CHECK(tcc_pool_for_tiles(pool, 2, ext, tile, 9, mark, NULL) == TCC_ERR_ARG);
    tcc_pool_free(pool);

    for (int p = 1; p <= 4; p++) {
        CHECK(tcc_threads_run(p, "threads", ranks_ok, NULL) == TCC_OK);
        CHECK(tcc_threads_run(p, "shm", ranks_ok, NULL) == TCC_OK);
    }
    CHECK(tcc_threads_run(2, "nccl", ranks_ok, NULL) == TCC_ERR_ARG);
    CHECK(tcc_threads_run(4, "threads", rank_fails, NULL) == TCC_ERR_FAILED);
    CHECK(atomic_load(&aborted) == 3);
    printf("ok\n");
    return 0;
}
