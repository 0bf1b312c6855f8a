#pragma once
// Things that register themselves from static initializers (subcommands, agent collectors), each
// with an order, kept until asked for. The list is a function's static, made on first use,
// whatever order the initializers run in.
#include <algorithm>
#include <utility>
#include <vector>

namespace gpuscope {

template <class T>
class OrderedRegistry {
 public:
  static bool add(int order, T item) {
    items().emplace_back(order, item);
    return true;
  }
  // Lowest order first; equal orders as they registered.
  static std::vector<T> sorted() {
    auto v = items();
    std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::vector<T> out;
    for (auto& [order, item] : v) out.push_back(item);
    return out;
  }

 private:
  static std::vector<std::pair<int, T>>& items() {
    static std::vector<std::pair<int, T>> v;
    return v;
  }
};

}  // namespace gpuscope
