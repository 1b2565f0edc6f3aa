/* Calls the library `tcc build --mpi tests/tiled/mpi_mm.tc -o libmm.so` builds:
 * every rank fills the input tiles it owns from closed-form values, runs, and
 * checks the output tiles it owns against loops; rank 0 checks that every element
 * of C is owned by exactly one rank. Also bad calls answer with errors. Prints
 * "ok" on rank 0 and exits 0 when everything holds.
 *
 * With -DTCC_SIZED the library is built from mpi_mm_sized.tc (run-time sizes):
 * open takes size_N and size_M, and opens whose sizes are refused on one rank,
 * or differ between ranks, must fail on every rank (no rank left waiting).
 * With -DTCC_SIZED_N_ONLY it was built with `--size M=7`: open takes size_N. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "mm.h"

#define N 10
#define M 7
static double fa(long i, long k) { return sin(0.3 * i + 0.7 * k); }
static double fb(long k, long j) { return cos(0.2 * k - 0.5 * j); }
static double fs(long i, long j) { long a = i < j ? i : j, b = i < j ? j : i; return 0.1 * a + 0.01 * b; }
static double want_c(long i, long j) {
  double s = 0.5 * fs(i, j);
  for (long k = 0; k < M; k++) s += fa(i, k) * fb(k, j);
  return s;
}
static double want_e(long i, long j) {
  double s = 0;
  for (long k = 0; k < M; k++) s += fa(i, k) * fa(j, k);
  return s;
}

/* Calls f(data + offset, start, extent) for every local tile of `name`. */
static long each_tile(tcc_dist *h, const char *name, double (*f)(long, long), int fill, double *maxerr) {
  int64_t t = tcc_dist_tensor(h, name), start[2], ext[2], n = tcc_dist_local_tiles(h, t), count = 0;
  double *d = tcc_dist_local_data(h, t);
  if (t < 0 || n < 0 || tcc_dist_ndims(h, t) != 2) { printf("bad tensor %s: %s\n", name, tcc_dist_last_error()); return -1; }
  for (int64_t x = 0; x < n; x++) {
    int64_t off = tcc_dist_tile(h, t, x, start, ext);
    if (off < 0) { printf("bad tile: %s\n", tcc_dist_last_error()); return -1; }
    for (int64_t a = 0; a < ext[0]; a++)
      for (int64_t b = 0; b < ext[1]; b++) {
        double *p = d + off + a * ext[1] + b;
        double w = f(start[0] + a, start[1] + b);
        if (fill) *p = w;
        else if (fabs(*p - w) > *maxerr) *maxerr = fabs(*p - w);
        count++;
      }
  }
  return count;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int bad = 0;
#if defined(TCC_SIZED)
  /* One rank's size refused; then the ranks disagreeing: NULL everywhere. */
  tcc_dist *r = tcc_mm_main_open(rank == size - 1 ? 0 : N, M, MPI_COMM_WORLD);
  if (r || !strstr(tcc_dist_last_error(), rank == size - 1 ? "at least 1" : "another rank")) {
    printf("rank %d: a refused size opened or said: %s\n", rank, r ? "(opened)" : tcc_dist_last_error());
    bad |= 1024;
  }
  r = tcc_mm_main_open(N, rank == 0 ? M + 1 : M, MPI_COMM_WORLD);
  if (r || !strstr(tcc_dist_last_error(), "different sizes for range `M`")) {
    printf("rank %d: disagreeing sizes opened or said: %s\n", rank, r ? "(opened)" : tcc_dist_last_error());
    bad |= 1024;
  }
  tcc_dist *h = tcc_mm_main_open(N, M, MPI_COMM_WORLD);
#elif defined(TCC_SIZED_N_ONLY)
  tcc_dist *h = tcc_mm_main_open(N, MPI_COMM_WORLD);
#else
  tcc_dist *h = tcc_mm_main_open(MPI_COMM_WORLD);
#endif
  if (!h) { printf("open failed: %s\n", tcc_dist_last_error()); MPI_Abort(MPI_COMM_WORLD, 2); }
  if (tcc_dist_rank(h) != rank || tcc_dist_size(h) != size) bad |= 1;
  /* Bad calls are errors, not crashes. */
  if (tcc_dist_tensor(h, "nope") != -1 || strlen(tcc_dist_last_error()) == 0) bad |= 2;
  int64_t st[2], ex[2];
  if (tcc_dist_tile(h, 0, 1 << 30, st, ex) != -1 || tcc_dist_extent(h, 0, 5) != -1 || tcc_dist_local_tiles(h, 99) != -1) bad |= 4;
  if (tcc_dist_extent(h, tcc_dist_tensor(h, "A"), 1) != M || tcc_dist_is_output(h, tcc_dist_tensor(h, "C")) != 1) bad |= 8;
  double e = 0;
  if (each_tile(h, "A", fa, 1, &e) < 0 || each_tile(h, "B", fb, 1, &e) < 0) bad |= 16;
  /* S from a whole dense array; a short array is an error that writes nothing. */
  double dense[N * N];
  for (long i = 0; i < N; i++)
    for (long j = 0; j < N; j++) dense[i * N + j] = fs(i, j);
  if (tcc_dist_pack_dense(h, tcc_dist_tensor(h, "S"), dense, N * N - 1) == 0) bad |= 16;
#if defined(TCC_SIZED)
  /* S from a .npy file rank 0 writes: each rank reads its own tiles' boxes. A
   * missing file fails on every rank. */
  char npy_path[256];
  snprintf(npy_path, sizeof npy_path, "mm_S_%d.npy", size);
  if (rank == 0) {
    FILE *f = fopen(npy_path, "wb");
    char head[118];
    memset(head, ' ', sizeof head);
    int n = snprintf(head, sizeof head, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }", N, N);
    head[n] = ' ';
    head[sizeof head - 1] = '\n';
    unsigned short len = sizeof head;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&len, 2, 1, f);
    fwrite(head, 1, sizeof head, f);
    fwrite(dense, sizeof(double), N * N, f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (tcc_dist_read_npy(h, tcc_dist_tensor(h, "S"), "no_such_file.npy") == 0 || !strstr(tcc_dist_last_error(), "read")) {
    printf("rank %d: a missing file was read or said: %s\n", rank, tcc_dist_last_error());
    bad |= 2048;
  }
  if (tcc_dist_read_npy(h, tcc_dist_tensor(h, "S"), npy_path) != 0) {
    printf("rank %d: read_npy failed: %s\n", rank, tcc_dist_last_error());
    bad |= 2048;
  }
#else
  if (tcc_dist_pack_dense(h, tcc_dist_tensor(h, "S"), dense, N * N) != 0) bad |= 16;
#endif
  if (tcc_dist_run(h) != 0) { printf("run failed: %s\n", tcc_dist_last_error()); bad |= 32; }
  double errc = 0, erre = 0;
  long nc = each_tile(h, "C", want_c, 0, &errc), ne = each_tile(h, "E", want_e, 0, &erre);
  if (nc < 0 || ne < 0 || errc > 1e-12 || erre > 1e-12) bad |= 64;
  /* E (symmetric) back to a dense array: this rank's tiles and their mirror
   * images are right; together the ranks cover all of it. */
  double whole[N * N], covered[N * N], all_covered[N * N];
  for (long x = 0; x < N * N; x++) whole[x] = NAN;
  if (tcc_dist_unpack_dense(h, tcc_dist_tensor(h, "E"), whole, N * N) != 0) bad |= 256;
  for (long x = 0; x < N * N; x++) {
    covered[x] = isnan(whole[x]) ? 0 : 1;
    if (!isnan(whole[x]) && fabs(whole[x] - want_e(x / N, x % N)) > 1e-12) bad |= 256;
  }
  MPI_Allreduce(covered, all_covered, N * N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  for (long x = 0; x < N * N; x++) if (all_covered[x] != 1) bad |= 512;
  long total_c = 0, total_e = 0;
  MPI_Reduce(&nc, &total_c, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&ne, &total_e, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  /* C: every element once; E: the canonical tiles only (tiles 3,3,3,1 of N: 10 of 16 tiles). */
  if (rank == 0 && (total_c != N * N || total_e >= N * N || total_e < N * (N + 1) / 2)) bad |= 128;
  tcc_dist_close(h);
  int all = 0;
  MPI_Reduce(&bad, &all, 1, MPI_INT, MPI_BOR, 0, MPI_COMM_WORLD);
  if (rank == 0) printf(all ? "failed: %d (C %ld elements, E %ld, errors %g %g)\n" : "ok\n", all, total_c, total_e, errc, erre);
  MPI_Finalize();
  return all != 0;
}
