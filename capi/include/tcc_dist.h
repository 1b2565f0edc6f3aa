/* libtcc_dist: distributed tiled tcc programs, called from MPI programs.
 *
 * A program is opened on a communicator (collective: every rank calls it with
 * the same source). Each rank then holds only the tiles it owns of every input
 * and output, back to back in one buffer per tensor; tcc_dist_tile says where
 * each tile starts in that buffer and which index box it holds (row-major, the
 * last index fastest). Tensors with declared symmetry store only their canonical
 * tiles (tile indices ordered within each group; fill the whole box of such a
 * tile, diagonal tiles included), block-sparse tensors only their nonzero tiles.
 * Fill the input tiles, call tcc_dist_run (collective), read the output tiles.
 * No rank ever holds a whole tensor.
 *
 * Errors: functions returning a handle give NULL, counts and offsets -1, and
 * tcc_dist_run nonzero; tcc_dist_last_error() describes the last error of the
 * calling thread. Tensor numbers are those of tcc_dist_tensor. */
#ifndef TCC_DIST_H
#define TCC_DIST_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct tcc_dist tcc_dist;

/* Compiles `source` and opens `program` (NULL: the source's only program) on the
 * communicator whose Fortran handle is `comm_f` (MPI_Comm_c2f(comm) in C). MPI
 * must be initialized. Threads per rank: TCC_NUM_THREADS, else every core. How
 * tiles move between ranks: TCC_EXCHANGE=auto (default), collective or one-sided
 * (MPI RMA gets); another value, or a TCC_FLOPS_PER_WORD that is not a number
 * >= 0, makes the open fail (NULL, tcc_dist_last_error says why). Ranges that
 * declare no tile size get the one the time model predicts fastest on this
 * many ranks (the same on every rank), or TCC_TILE=N (auto: the default). */
tcc_dist *tcc_dist_open(const char *source, const char *program, int comm_f);
/* tcc_dist_open for a program with run-time ranges (`range O;`): `nsizes`
 * (range name, size) pairs, one for every run-time range the program's tensors
 * use and no other, each size >= 1. Every rank must pass the same sizes: the
 * ranks compare them, and when one rank's are refused or two ranks differ,
 * the open fails on every rank (NULL) rather than leaving ranks waiting.
 * The libraries' open functions (tcc_LIB_PROG_open(size_t size_O, ...,
 * MPI_Comm)) call it. */
tcc_dist *tcc_dist_open_sized(const char *source, const char *program, int comm_f, int64_t nsizes,
                              const char *const *names, const int64_t *sizes);
const char *tcc_dist_last_error(void);
int64_t tcc_dist_rank(const tcc_dist *h);
int64_t tcc_dist_size(const tcc_dist *h);
/* An input's or output's number by name, or -1. */
int64_t tcc_dist_tensor(const tcc_dist *h, const char *name);
/* 1 for an output, 0 for an input, -1 for a bad number. */
int tcc_dist_is_output(const tcc_dist *h, int64_t tensor);
int64_t tcc_dist_ndims(const tcc_dist *h, int64_t tensor);
int64_t tcc_dist_extent(const tcc_dist *h, int64_t tensor, int64_t dim);
/* The tiles this rank holds of `tensor`, and their elements in all. */
int64_t tcc_dist_local_tiles(const tcc_dist *h, int64_t tensor);
int64_t tcc_dist_local_len(const tcc_dist *h, int64_t tensor);
/* Tile `i` (0 <= i < local_tiles): writes its box's first index and extents
 * (ndims entries each) and returns its offset in the tensor's buffer. */
int64_t tcc_dist_tile(const tcc_dist *h, int64_t tensor, int64_t i, int64_t *start, int64_t *extent);
/* This rank's buffer of `tensor` (local_len elements; NULL when it holds none). */
double *tcc_dist_local_data(tcc_dist *h, int64_t tensor);
/* Conversions with the whole tensor, dense and row-major (`len` must be the
 * product of its extents, else an error): pack fills this rank's tiles from it;
 * unpack writes this rank's tiles into it, each element with all its images
 * under the tensor's symmetry (sign applied), leaving other elements alone.
 * 0 on success. pack refuses (-1) an array without the tensor's declared
 * symmetry (to 1e-12 of its largest element) or nonzero outside its declared
 * blocks: the tiles would silently drop values. */
int tcc_dist_pack_dense(tcc_dist *h, int64_t tensor, const double *dense, int64_t len);
int tcc_dist_unpack_dense(tcc_dist *h, int64_t tensor, double *dense, int64_t len);
/* Fills this rank's tiles of input `tensor` from the .npy file at `path`, which
 * holds the whole tensor (every rank must be able to read it); only the boxes
 * of the rank's own tiles are read. Collective. 0 on success; a file that is
 * unreadable, of another shape, or without the tensor's declared symmetry or
 * zero blocks fails on every rank (-1, tcc_dist_last_error says which element). */
int tcc_dist_read_npy(tcc_dist *h, int64_t tensor, const char *path);
/* Runs the program (collective). 0 on success. Refused on every rank (-1)
 * when some rank's input tile on the diagonal of a symmetry holds images of
 * one element that disagree (written by hand through tcc_dist_local_data). */
int tcc_dist_run(tcc_dist *h);
void tcc_dist_close(tcc_dist *h);

#ifdef __cplusplus
}
#endif
#endif
