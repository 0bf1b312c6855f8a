// Two threads pinned to CPU 0 hand a byte back and forth through two pipes: each round trip is
// two context switches and four syscalls, and nothing else. usage: pingpong [N [REPS]]; with
// PINGPONG_WAIT set it prints "ready PID" and waits for a byte on stdin before timing (so that a
// tracer can be told the pid first). Prints the median, min and max ns per round trip of REPS
// runs of N.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int to_peer[2], to_main[2];

static void pin(void) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(0, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static void* peer(void* arg) {
  char c;
  pin();
  while (read(to_peer[0], &c, 1) == 1)
    if (write(to_main[1], &c, 1) != 1) break;
  return arg;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void* x, const void* y) {
  double d = *(const double*)x - *(const double*)y;
  return d < 0 ? -1 : d > 0;
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  int reps = argc > 2 ? atoi(argv[2]) : 7;
  double r[64];
  char c = 'x';
  pthread_t t;
  if (n < 1 || reps < 1 || reps > 64 || pipe(to_peer) || pipe(to_main)) {
    fprintf(stderr, "usage: pingpong [N [REPS (1-64)]]\n");
    return 2;
  }
  pin();
  pthread_create(&t, 0, peer, 0);
  if (getenv("PINGPONG_WAIT")) {
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (read(0, &c, 1) != 1) return 1;
  }
  for (int k = 0; k < reps; k++) {
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
      if (write(to_peer[1], &c, 1) != 1 || read(to_main[0], &c, 1) != 1) return 1;
    r[k] = (now_ns() - t0) / n;
  }
  qsort(r, reps, sizeof r[0], cmp);
  printf("ns per round trip: median %.0f min %.0f max %.0f\n", r[reps / 2], r[0], r[reps - 1]);
  return 0;
}
