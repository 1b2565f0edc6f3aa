/* A rank that dies inside a job calling a tcc library: every rank opens the
 * library's program; the last rank then exits (status 3, no MPI_Finalize) while
 * the others call tcc_dist_run, which waits in an exchange for it. The job must
 * end within seconds with a non-zero status, not hang (tests/mpi_library.rs). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "mm.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tcc_dist *h = tcc_mm_main_open(MPI_COMM_WORLD);
  if (!h) { printf("open failed: %s\n", tcc_dist_last_error()); MPI_Abort(MPI_COMM_WORLD, 2); }
  if (rank == size - 1) {
    fprintf(stderr, "rank %d: dying before the run\n", rank);
    _exit(3);
  }
  int rc = tcc_dist_run(h);
  /* Not reached while the dead rank is awaited; if the run returns, say so. */
  printf("rank %d: run returned %d: %s\n", rank, rc, rc ? tcc_dist_last_error() : "");
  tcc_dist_close(h);
  MPI_Finalize();
  return rc ? 1 : 0;
}
