/* Calls the library `tcc build --mpi` builds from tests/tiled/mpi_complex.tc
 * (compiled with -DCOMPLEX), tests/tiled/mpi_constructs.tc (-DCONSTRUCTS:
 * broadcast sums, constants inside functions, `where`, `max`),
 * tests/tiled/mpi_unions.tc (-DUNIONS: blocks of a union range, a stable
 * softmax) or tests/tiled/mpi_bf16.tc: every rank fills the
 * input tiles it owns, runs, and checks the output tiles it owns against loops
 * written here; together the ranks own every output element once. Complex
 * tensors are their parts X_re and X_im; bf16 tiles hold bf16 values (inputs
 * rounded when the library runs, outputs after). Prints "ok" on rank 0 and
 * exits 0 when everything holds. */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "mm.h"

#define N 7
#define K 5

/* Round to nearest even bf16 (finite values), as a double. */
static double bf16(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

static double _Complex a(long i, long k) { return sin(0.3 * i + 0.7 * k + 0.1) + I * cos(0.2 * i - 0.5 * k); }
static double _Complex b(long k, long j) { return cos(0.4 * k + 0.1 * j) + I * sin(0.9 * k * j + 0.2); }
/* More bits than bf16 holds. */
static double x(long i, long k) { return 1.0 + sin(0.37 * i + 0.71 * k) / 3.0 + 1e-4; }
static double w(long k, long j) { return cos(0.5 * k - 0.3 * j); }
static double u(long i) { return 0.25 * i * i - 1.0; }

/* P = X W of mpi_constructs.tc, in plain loops. */
static double p(long i, long j) {
  double s = 0;
  for (long k = 0; k < K; k++) s += x(i, k) * w(k, j);
  return s;
}
static double y(long i, long j) { return u(i) - u(j) + 1.0 / sqrt(p(i, j) * p(i, j) + 1e-3); }

/* mpi_unions.tc: P = O + V with O = 3 (rows 0-2 of P) and V = 4 (rows 3-6). */
#define NO 3
static double h(long p, long q) { return cos(0.3 * p - 0.45 * q + 0.2) + 0.1 * p; }
static double f(long p, long q) {
  if (p < NO && q < NO) { /* F[i,j] = H[i,j] + H[i,a] H[a,j] */
    double s = h(p, q);
    for (long a = NO; a < N; a++) s += h(p, a) * h(a, q);
    return s;
  }
  if (p >= NO && q < NO) { /* F[a,i] = 2 H[a,i] - X[a,k] X[i,k] */
    double s = 2 * h(p, q);
    for (long k = 0; k < K; k++) s -= x(p, k) * x(q, k);
    return s;
  }
  return h(p, q);
}
/* softmax over k of 600 X[p,k], the row maximum subtracted first. */
static double softmax(long p, long k) {
  double m = 600 * x(p, 0), s = 0;
  for (long c = 1; c < K; c++) m = fmax(m, 600 * x(p, c));
  for (long c = 0; c < K; c++) s += exp(600 * x(p, c) - m);
  return exp(600 * x(p, k) - m) / s;
}

/* The value element (i, j) of tensor `name` must hold (inputs: what is written). */
static double value(const char *name, long i, long j) {
#if defined(UNIONS)
  switch (name[0]) {
  case 'H': return h(i, j);
  case 'X': return x(i, j);
  case 'F': return f(i, j);
  default: return softmax(i, j); /* S */
  }
#elif defined(CONSTRUCTS)
  switch (name[0]) {
  case 'X': return x(i, j);
  case 'W': return w(i, j);
  case 'u': return u(i);
  case 'Y': return y(i, j);
  case 'R': return p(i, j) > 3.5 ? p(i, j) : 0.01 * p(i, j);
  default: { /* M: the row maximum of Y */
    double m = y(i, 0);
    for (long c = 1; c < N; c++) m = fmax(m, y(i, c));
    return m;
  }
  }
#elif defined(COMPLEX)
  int im = strstr(name, "_im") != NULL;
  double _Complex z;
  if (name[0] == 'A') z = a(i, j);
  else if (name[0] == 'B') z = b(i, j);
  else {
    z = 0;
    for (long k = 0; k < K; k++) z += a(i, k) * conj(b(k, j));
  }
  return im ? cimag(z) : creal(z);
#else
  if (name[0] == 'X') return x(i, j);
  if (name[0] == 'W') return w(i, j);
  double s = 0;
  for (long k = 0; k < K; k++) s += bf16(x(i, k)) * w(k, j);
  return s;
#endif
}

/* Fills every local tile of `name` (mode 0), checks it against value() (mode 1,
 * largest error relative to the value in *err) or against bf16(value()) (mode
 * 2, the input after rounding); the number of elements visited, or -1. */
static long each_tile(tcc_dist *h, const char *name, int mode, double *err) {
  int64_t t = tcc_dist_tensor(h, name), start[2], ext[2];
  int64_t n = tcc_dist_local_tiles(h, t), count = 0;
  double *d = tcc_dist_local_data(h, t);
  int64_t nd = t < 0 ? -1 : tcc_dist_ndims(h, t);
  if (t < 0 || n < 0 || nd < 1 || nd > 2) { printf("bad tensor %s: %s\n", name, tcc_dist_last_error()); return -1; }
  for (int64_t q = 0; q < n; q++) {
    int64_t off = tcc_dist_tile(h, t, q, start, ext);
    if (off < 0) { printf("bad tile: %s\n", tcc_dist_last_error()); return -1; }
    if (nd == 1) start[1] = 0, ext[1] = 1; /* a vector: one column */
    for (int64_t r = 0; r < ext[0]; r++)
      for (int64_t c = 0; c < ext[1]; c++) {
        double *p = d + off + r * ext[1] + c, v = value(name, start[0] + r, start[1] + c);
        if (mode == 0) *p = v;
        else {
          double want = mode == 2 ? bf16(v) : v, e = fabs(*p - want) / (fabs(want) + 1e-300);
#if !defined(COMPLEX) && !defined(CONSTRUCTS) && !defined(UNIONS)
          /* A bf16 output holds a bf16 value, one rounding (half an ulp,
           * 2^-8 relative at most) from the sum. */
          if (mode == 1) e = (*p != bf16(*p) || e > (1.0 + 1e-9) / 256) ? 1 : 0;
#endif
          if (isnan(e)) e = INFINITY; /* a NaN (of the output or the loops) fails */
          if (e > *err) *err = e;
        }
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
  /* Elements of every output together. */
#if defined(UNIONS)
  const char *ins[] = {"H", "X"}, *outs[] = {"F", "S"};
  int nin = 2, nout = 2;
  double tol = 1e-12;
  long elements = N * N + N * K;
#elif defined(CONSTRUCTS)
  const char *ins[] = {"X", "W", "u"}, *outs[] = {"Y", "R", "M"};
  int nin = 3, nout = 3;
  double tol = 1e-12;
  long elements = 2 * N * N + N;
#elif defined(COMPLEX)
  const char *ins[] = {"A_re", "A_im", "B_re", "B_im"}, *outs[] = {"C_re", "C_im"};
  int nin = 4, nout = 2;
  double tol = 1e-12;
  long elements = 2 * N * N;
  if (tcc_dist_tensor(h, "A") >= 0) { printf("A is not a tensor of the library: its parts are\n"); MPI_Abort(MPI_COMM_WORLD, 3); }
#else
  const char *ins[] = {"X", "W"}, *outs[] = {"Y"};
  int nin = 2, nout = 1;
  double tol = 0;
  long elements = N * N;
#endif
  int bad = 0;
  double e = 0;
  for (int q = 0; q < nin; q++)
    if (each_tile(h, ins[q], 0, &e) < 0) bad |= 1;
  if (tcc_dist_run(h) != 0) { printf("run failed: %s\n", tcc_dist_last_error()); bad |= 2; }
  long total = 0;
  for (int q = 0; q < nout; q++) {
    double err = 0;
    long n = each_tile(h, outs[q], 1, &err), sum = 0;
    if (n < 0 || err > tol) { printf("rank %d: %s differs by %g\n", rank, outs[q], err); bad |= 4; }
    MPI_Reduce(&n, &sum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    total += sum;
  }
#if !defined(COMPLEX) && !defined(CONSTRUCTS) && !defined(UNIONS)
  double err = 0;
  if (each_tile(h, "X", 2, &err) < 0 || err > 0) { printf("rank %d: X not rounded to bf16 (%g)\n", rank, err); bad |= 16; }
#endif
  if (rank == 0 && total != elements) bad |= 8;
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
  if (rank == 0) printf(all ? "failed %d\n" : "ok\n", all);
  tcc_dist_close(h);
  MPI_Finalize();
  return all != 0;
}
