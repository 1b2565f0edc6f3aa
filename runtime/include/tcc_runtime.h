/* tcc runtime: C interface. Link with -ltcc_runtime (target/<profile>/libtcc_runtime.{a,so};
 * the static library also needs -lpthread -ldl -lm).
 *
 * Return codes: 0 success, TCC_ERR_ARG a bad argument, TCC_ERR_ABORTED another rank
 * failed (return from the rank function), TCC_ERR_FAILED a rank or task failed. */
#ifndef TCC_RUNTIME_H
#define TCC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TCC_OK 0
#define TCC_ERR_ARG (-1)
#define TCC_ERR_ABORTED (-2)
#define TCC_ERR_FAILED (-3)

#define TCC_SCHEDULE_STATIC 0
#define TCC_SCHEDULE_DYNAMIC 1

#define TCC_OP_SUM 0
#define TCC_OP_MAX 1
#define TCC_OP_MIN 2

typedef struct TccPool tcc_pool;
typedef struct TccComm tcc_comm;

/* The runtime's version ("0.1.0"). */
const char *tcc_runtime_version(void);

/* A pool of `threads` workers (0: one per core). */
tcc_pool *tcc_pool_new(size_t threads);
void tcc_pool_free(tcc_pool *pool);

/* A tile task: the tile is [lo[d], hi[d]) in each of the ndims dimensions.
 * Return 0, or non-zero to report a failure. Called concurrently from workers. */
typedef int (*tcc_tile_fn)(void *ctx, const size_t *lo, const size_t *hi, size_t worker);

/* Runs `task` for every tile of [0, extents) cut in tiles of size `tile`. */
int tcc_pool_for_tiles(const tcc_pool *pool, size_t ndims, const size_t *extents, const size_t *tile,
                       int schedule, tcc_tile_fn task, void *ctx);

/* Runs `rank_fn` on `nranks` in-process ranks; backend is "threads" or "shm". A rank
 * returning non-zero aborts the others; the call then returns TCC_ERR_FAILED. */
typedef int (*tcc_rank_fn)(void *ctx, tcc_comm *comm);
int tcc_threads_run(size_t nranks, const char *backend, tcc_rank_fn rank_fn, void *ctx);

int tcc_comm_rank(const tcc_comm *comm);
int tcc_comm_size(const tcc_comm *comm);
int tcc_comm_allreduce(tcc_comm *comm, double *buf, size_t n, int op);
int tcc_comm_broadcast(tcc_comm *comm, double *buf, size_t n, int root);
/* recv holds n * size doubles. */
int tcc_comm_allgather(tcc_comm *comm, const double *send, size_t n, double *recv);
/* Words (doubles) and messages sent by this rank so far. */
int tcc_comm_stats(const tcc_comm *comm, uint64_t *words, uint64_t *messages);

#ifdef __cplusplus
}
#endif

#endif
