/* A generated library called before fork() and then in the child (which has none
   of the parent's pool threads): the child must not wait for them. */
#include "fm.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define M 192
static double A[M * M], B[M * M], C[M * M], want[M * M];

static int call(void) {
  for (int x = 0; x < M * M; x++) C[x] = -1.0;
  return tcc_fm_main(A, M * M, B, M * M, C, M * M);
}

static int same(void) {
  for (int x = 0; x < M * M; x++)
    if (C[x] != want[x]) return 0;
  return 1;
}

int main(void) {
  for (int x = 0; x < M * M; x++) {
    A[x] = (double)(x % 7) - 3.0;
    B[x] = (double)(x % 5) * 0.5;
  }
  if (call() != 0) return 10;
  for (int x = 0; x < M * M; x++) want[x] = C[x];
  for (int round = 0; round < 2; round++) {
    pid_t p = fork();
    if (p < 0) return 11;
    if (p == 0) {
      alarm(30); /* a hang becomes SIGALRM, not a stuck test */
      if (call() != 0 || !same()) _exit(12);
      if (call() != 0 || !same()) _exit(13);
      _exit(0);
    }
    int st = 0;
    if (waitpid(p, &st, 0) != p) return 14;
    if (!WIFEXITED(st)) {
      fprintf(stderr, "child killed by signal %d (a hang after fork)\n", WTERMSIG(st));
      return 15;
    }
    if (WEXITSTATUS(st) != 0) return WEXITSTATUS(st);
    /* the parent's pool still works */
    if (call() != 0 || !same()) return 16;
  }
  puts("ok");
  return 0;
}
