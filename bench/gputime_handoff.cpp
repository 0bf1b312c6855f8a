// Workload for gputime_overhead: hands libgpuscope-cupti.so's exported function buffers of
// GS_GT_BATCH_MAX records, as the library does after each CUPTI buffer, and prints
// "ns_per_call=X" (per hand-off). With "idle SECONDS" it instead initializes the library (no
// gpuscope attached: CUPTI's activity stays off) and prints the CPU time its thread used per
// second: the whole cost of an idle library, since nothing runs on the process's own threads.
#include <dlfcn.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gputime/gputime.h"

static double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

// Time the library's thread spent on a CPU, in ns.
static double lib_thread_cpu_ns() {
  DIR* d = opendir("/proc/self/task");
  double ns = -1;
  while (dirent* e = d ? readdir(d) : nullptr) {
    std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::ifstream c(dir + "/comm");
    std::string comm;
    std::getline(c, comm);
    if (comm != "gpuscope-cupti") continue;
    std::ifstream s(dir + "/schedstat");  // time on CPU in ns, first field
    double v;
    if (s >> v) ns = v;
  }
  if (d) closedir(d);
  return ns;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: gputime_handoff LIB CALLS | LIB idle SECONDS\n");
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  if (!strcmp(argv[2], "idle")) {
    auto init = (int (*)())dlsym(h, "InitializeInjection");
    init();
    double secs = argc > 3 ? atof(argv[3]) : 5;
    double c0 = lib_thread_cpu_ns(), t0 = now_ns();
    usleep(static_cast<useconds_t>(secs * 1e6));
    double c1 = lib_thread_cpu_ns(), t1 = now_ns();
    if (c0 < 0) {
      printf("no library thread (CUPTI not found?)\n");
      return 1;
    }
    printf("idle_cpu_ns_per_s=%.0f\n", (c1 - c0) / ((t1 - t0) / 1e9));
    return 0;
  }
  auto buffer = (void (*)(const gs_gt_record*, uint32_t, const gs_gt_batch*))dlsym(h, "gpuscope_cupti_buffer");
  long calls = atol(argv[2]);
  std::vector<gs_gt_record> recs(GS_GT_BATCH_MAX);
  for (size_t i = 0; i < recs.size(); i++) {
    recs[i].kind = GS_GT_KERNEL;
    recs[i].start_ns = 1000 * i;
    recs[i].end_ns = 1000 * i + 500;
    recs[i].name_id = 1;
  }
  gs_gt_batch b{};
  b.version = GS_GT_VERSION;
  buffer(recs.data(), recs.size(), &b);
  // In bursts with pauses, as the library's flushes come: the consumer drains in between.
  double total = 0;
  for (long i = 0; i < calls; i++) {
    double t0 = now_ns();
    buffer(recs.data(), recs.size(), &b);
    total += now_ns() - t0;
    if (i % 10 == 9) usleep(20000);
  }
  printf("calls=%ld records_per_call=%d ns_per_call=%.1f\n", calls, GS_GT_BATCH_MAX, total / calls);
  return 0;
}
