/* The floor of exact kernel times through CUPTI, for tests/gpu/checks/82_gputime_duty.sh: a
 * CUDA injection library (CUDA_INJECTION64_PATH) that enables only CUPTI's concurrent-kernel
 * activity from cuInit on, takes CUPTI's buffers (1 MiB, at most 32, recycled, as
 * libgpuscope-cupti.so does), flushes every 100 ms and counts the kernel records; at exit it
 * prints "gpuscope-cupti-floor: N kernel records, D dropped" on stderr. No hand-off, no clock
 * callback, no other kind. libcupti is dlopened from GPUSCOPE_CUPTI_PATH (a file or a directory),
 * else beside the loaded libcudart / libcuda / libtorch_cuda (toolkit and wheel layouts), else
 * through the dynamic linker. Built in the tree (build/tests/libcupti-floor.so): the GPU host
 * has no toolkit. */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define BUF_BYTES (1u << 20)
#define BUF_MAX 32

static __typeof__(&cuptiActivityGetNextRecord) next_record;
static __typeof__(&cuptiActivityFlushAll) flush_all;
static __typeof__(&cuptiActivityGetNumDroppedRecords) num_dropped;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *free_bufs[BUF_MAX];
static unsigned n_free, n_bufs;
static unsigned long long kernels, dropped;

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *max_records = 0;
  pthread_mutex_lock(&lock);
  uint8_t *b = n_free ? free_bufs[--n_free] : NULL;
  if (!b && n_bufs < BUF_MAX && (b = aligned_alloc(8, BUF_BYTES))) n_bufs++;
  pthread_mutex_unlock(&lock);
  *buffer = b;
  *size = b ? BUF_BYTES : 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)size;
  size_t d = 0;
  pthread_mutex_lock(&lock);
  if (num_dropped && num_dropped(ctx, stream, &d) == CUPTI_SUCCESS) dropped += d;
  CUpti_Activity *rec = NULL;
  while (next_record(buffer, valid, &rec) == CUPTI_SUCCESS)
    kernels += rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  if (n_free < BUF_MAX)
    free_bufs[n_free++] = buffer;
  else
    free(buffer);
  pthread_mutex_unlock(&lock);
}

static void *flusher(void *arg) {
  (void)arg;
  for (;;) {
    usleep(100000);
    flush_all(0);
  }
  return NULL;
}

static void at_exit(void) {
  flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  fprintf(stderr, "gpuscope-cupti-floor: %llu kernel records, %llu dropped\n", kernels, dropped);
}

static void *try_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return h && dlsym(h, "cuptiActivityEnable") ? h : NULL;
}

static int beside(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  void **h = data;
  const char *name = info->dlpi_name, *base = name ? strrchr(name, '/') : NULL;
  if (!base || (strncmp(base + 1, "libcudart.so", 12) && strncmp(base + 1, "libcuda.so", 10) &&
                strncmp(base + 1, "libtorch_cuda", 13)))
    return 0;
  static const char *rel[] = {"libcupti.so.13", "../../cuda_cupti/lib/libcupti.so.13", "../../cu13/lib/libcupti.so.13",
                              "../extras/CUPTI/lib64/libcupti.so.13"};
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof rel / sizeof rel[0] && !*h; i++)
    if (snprintf(path, sizeof path, "%.*s/%s", (int)(base - name), name, rel[i]) < (int)sizeof path)
      *h = try_open(path);
  return *h != NULL;
}

static void *find_cupti(void) {
  const char *env = getenv("GPUSCOPE_CUPTI_PATH");
  char path[PATH_MAX];
  void *h = NULL;
  if (env && *env) {
    h = try_open(env);
    if (!h && snprintf(path, sizeof path, "%s/libcupti.so.13", env) < (int)sizeof path) h = try_open(path);
    return h;
  }
  dl_iterate_phdr(beside, &h);
  return h ? h : try_open("libcupti.so.13");
}

EXPORT int InitializeInjection(void) {
  static int started;
  if (__atomic_exchange_n(&started, 1, __ATOMIC_SEQ_CST)) return 1;
  void *h = find_cupti();
  if (!h) {
    fprintf(stderr, "gpuscope-cupti-floor: no libcupti found (set GPUSCOPE_CUPTI_PATH)\n");
    return 1;
  }
  __typeof__(&cuptiActivityEnable) enable = (__typeof__(enable))dlsym(h, "cuptiActivityEnable");
  __typeof__(&cuptiActivityRegisterCallbacks) reg = (__typeof__(reg))dlsym(h, "cuptiActivityRegisterCallbacks");
  next_record = (__typeof__(next_record))dlsym(h, "cuptiActivityGetNextRecord");
  flush_all = (__typeof__(flush_all))dlsym(h, "cuptiActivityFlushAll");
  num_dropped = (__typeof__(num_dropped))dlsym(h, "cuptiActivityGetNumDroppedRecords");
  if (!enable || !reg || !next_record || !flush_all || reg(requested, completed) != CUPTI_SUCCESS ||
      enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    fprintf(stderr, "gpuscope-cupti-floor: CUPTI refused; nothing recorded\n");
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, flusher, NULL) == 0) pthread_detach(t);
  atexit(at_exit);
  return 1;
}
