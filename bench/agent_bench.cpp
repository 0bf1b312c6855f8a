// Scrape cost of the agent at a given number of series: one refresh (snapshot folded and
// /metrics rendered, on the loop thread) and one /metrics request (the HTTP thread's part),
// medians of --rounds. Synthetic kernel rows: --pids processes x --kernels kernels each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cmd/agent/agent.h"
#include "cmd/agent/registry.h"
#include "kernels/kernels.h"
#include "kernels/kernels_collector.h"

using namespace gpuscope;

int main(int argc, char** argv) {
  unsigned pids = 200, kernels = 50, rounds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--pids")) pids = static_cast<unsigned>(atoi(argv[i + 1]));
    if (!strcmp(argv[i], "--kernels")) kernels = static_cast<unsigned>(atoi(argv[i + 1]));
    if (!strcmp(argv[i], "--rounds")) rounds = static_cast<unsigned>(atoi(argv[i + 1]));
  }
  std::vector<KernelRow> rows;
  for (unsigned p = 0; p < pids; p++)
    for (unsigned k = 0; k < kernels; k++)
      rows.push_back({4000000 + p, "trainer", GS_K_DRIVER, 0x1000 + k,
                      "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, " +
                          std::to_string(k) + ")",
                      "libtorch_cuda.so", 1000 + k});
  AgentOptions o;
  o.max_kernels = kernels;
  o.scope.containers = std::make_shared<ProcessContainers>(ContainerPaths::with_pods_dir("/nonexistent"));
  std::vector<std::unique_ptr<AgentCollector>> feed;
  feed.push_back(make_kernels_collector([&rows] { return rows; }));
  Agent view(o, std::move(feed), nullptr);
  view.start(nullptr);
  std::vector<double> refresh_s, serve_s;
  size_t bytes = 0;
  for (unsigned r = 0; r < rounds; r++) {
    for (auto& row : rows) row.launches += 7;
    auto t0 = std::chrono::steady_clock::now();
    view.refresh();
    auto t1 = std::chrono::steady_clock::now();
    HttpReply rep = view.serve("/metrics");
    auto t2 = std::chrono::steady_clock::now();
    bytes = rep.body.size();
    refresh_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    serve_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  printf("{\"series\":%zu,\"bytes\":%zu,\"refresh_ms\":%.3f,\"serve_ms\":%.3f,\"rounds\":%u}\n", view.series(), bytes,
         med(refresh_s) * 1e3, med(serve_s) * 1e3, rounds);
  return 0;
}
