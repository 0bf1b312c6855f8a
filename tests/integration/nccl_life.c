/* Communicator life for nccl_test, one process on the NCCL stand-in: ncclCommInitAll of 4 ranks
 * on devices 3 2 1 0; ncclCommShrink excluding rank 1, each remaining rank on its own thread,
 * with 2 all-reduces of 1024 floats each on the shrunk communicator, and rank 0's shrink that
 * excludes itself (ncclInvalidUsage); then two ranks of a
 * communicator made by ncclCommInitRankScalable and ncclCommInitRankConfig (one each, on two
 * threads) and one all-reduce on it. Everything is destroyed.
 * stdout: "id=H" (the FNV-1a 64 hash of the ncclUniqueId's 128 bytes), then "done". */
#include <nccl.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static ncclComm_t all[4], shrunk[4];
static ncclUniqueId id;
static float buf[1024];

static void check(const char *what, ncclResult_t r) {
  if (r != ncclSuccess) {
    fprintf(stderr, "nccl_life: %s: %s\n", what, ncclGetErrorString(r));
    exit(1);
  }
}

static void *shrink_rank(void *arg) {
  int i = (int)(intptr_t)arg, excluded = 1;
  check("ncclCommShrink", ncclCommShrink(all[i], &excluded, 1, &shrunk[i], NULL, 0));
  for (int k = 0; k < 2; k++)
    check("ncclAllReduce", ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, shrunk[i], NULL));
  check("ncclCommDestroy", ncclCommDestroy(shrunk[i]));
  return NULL;
}

static void *new_rank(void *arg) {
  int i = (int)(intptr_t)arg;
  ncclComm_t c;
  if (i == 0)
    check("ncclCommInitRankScalable", ncclCommInitRankScalable(&c, 2, 0, 1, &id, NULL));
  else
    check("ncclCommInitRankConfig", ncclCommInitRankConfig(&c, 2, id, 1, NULL));
  check("ncclAllReduce", ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, c, NULL));
  check("ncclCommDestroy", ncclCommDestroy(c));
  return NULL;
}

int main(void) {
  const int devs[4] = {3, 2, 1, 0};
  pthread_t t[4];
  check("ncclCommInitAll", ncclCommInitAll(all, 4, devs));
  for (int i = 0; i < 4; i++)
    if (i != 1) pthread_create(&t[i], NULL, shrink_rank, (void *)(intptr_t)i);
  for (int i = 0; i < 4; i++)
    if (i != 1) pthread_join(t[i], NULL);
  /* A rank may not exclude itself: ncclInvalidUsage, at once. */
  int self = 0;
  ncclComm_t none;
  if (ncclCommShrink(all[0], &self, 1, &none, NULL, 0) != ncclInvalidUsage) {
    fprintf(stderr, "nccl_life: a shrink excluding its own rank did not fail\n");
    return 1;
  }
  for (int i = 0; i < 4; i++) check("ncclCommDestroy", ncclCommDestroy(all[i]));

  check("ncclGetUniqueId", ncclGetUniqueId(&id));
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) h = (h ^ (unsigned char)id.internal[i]) * 0x100000001b3ull;
  printf("id=%016llx\n", (unsigned long long)h);
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, new_rank, (void *)(intptr_t)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("done\n");
  return 0;
}
