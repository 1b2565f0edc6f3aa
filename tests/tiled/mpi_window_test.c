/* Calls the library `tcc build --mpi tests/tiled/mpi_window.tc -o libmm.so`
 * builds (a strided window read at affine subscripts): every rank fills the
 * input tiles it owns, runs, and checks the output tiles it owns against loops;
 * together the ranks own every element of O once. Prints "ok" on rank 0 and
 * exits 0 when everything holds. */
#include <math.h>
#include <stdio.h>
#include "mm.h"

#define T 9
#define R 3
#define K 4
static double fi(long l) { return sin(0.37 * l + 0.1); }
static double ff(long r, long k) { return cos(0.5 * r - 0.3 * k); }
static double want_o(long t, long k) {
  double s = 0;
  for (long r = 0; r < R; r++) s += fi(2 * t + r) * ff(r, k);
  return s;
}

/* Fills (or checks, with the largest error in *err) every local tile of `name`,
 * a tensor of one or two dimensions; the number of elements visited. */
static long each_tile(tcc_dist *h, const char *name, int fill, double *err) {
  int64_t t = tcc_dist_tensor(h, name), start[2] = {0, 0}, ext[2] = {1, 1};
  int64_t n = tcc_dist_local_tiles(h, t), nd = tcc_dist_ndims(h, t), count = 0;
  double *d = tcc_dist_local_data(h, t);
  if (t < 0 || n < 0 || nd < 1 || nd > 2) { printf("bad tensor %s: %s\n", name, tcc_dist_last_error()); return -1; }
  for (int64_t x = 0; x < n; x++) {
    int64_t off = tcc_dist_tile(h, t, x, start, ext);
    if (off < 0) { printf("bad tile: %s\n", tcc_dist_last_error()); return -1; }
    int64_t rows = ext[0], cols = nd == 2 ? ext[1] : 1;
    for (int64_t a = 0; a < rows; a++)
      for (int64_t b = 0; b < cols; b++) {
        double *p = d + off + a * cols + b;
        long i = start[0] + a, j = nd == 2 ? start[1] + b : 0;
        double w = name[0] == 'I' ? fi(i) : name[0] == 'F' ? ff(i, j) : want_o(i, j);
        if (fill) *p = w;
        else if (fabs(*p - w) > *err) *err = fabs(*p - w);
        count++;
      }
  }
  return count;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tcc_dist *h = tcc_mm_main_open(MPI_COMM_WORLD);
  if (!h) { printf("open failed: %s\n", tcc_dist_last_error()); MPI_Abort(MPI_COMM_WORLD, 2); }
  int bad = 0;
  double e = 0;
  if (each_tile(h, "I", 1, &e) < 0 || each_tile(h, "F", 1, &e) < 0) bad |= 1;
  if (tcc_dist_run(h) != 0) { printf("run failed: %s\n", tcc_dist_last_error()); bad |= 2; }
  double err = 0;
  long n = each_tile(h, "O", 0, &err), total = 0;
  if (n < 0 || err > 1e-12) { printf("rank %d: O differs by %g\n", rank, err); bad |= 4; }
  MPI_Reduce(&n, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0 && total != T * K) bad |= 8;
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
  if (rank == 0) printf(all ? "failed %d\n" : "ok\n", all);
  tcc_dist_close(h);
  MPI_Finalize();
  return all != 0;
}
