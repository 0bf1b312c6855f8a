#pragma once
// The check the subcommands' bad-input tests share.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness.h"

namespace gstest {

// Runs `gpuscope SUB ARGS`, which must refuse them as a usage error: exit status 2, one line on
// stderr, nothing on stdout. Its result, for the test's own checks of what it said.
inline Result expect_usage_error(const std::string& sub, const std::vector<std::string>& args) {
  std::vector<std::string> argv{gpuscope_bin(), sub};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run(argv);
  std::string what = sub + " " + testing::PrintToString(args) + ": ";
  EXPECT_EQ(r.exit_code, 2) << what << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << r.err;
  EXPECT_EQ(r.out, "") << what;
  return r;
}

}  // namespace gstest
