// The one JSON writer: nesting, numbers, and strings made of any byte still parse.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "core/output.h"

namespace gpuscope {
namespace {

std::string line(const std::function<void(JsonLine&)>& f) {
  fmt::memory_buffer b;
  JsonLine j(b);
  f(j);
  j.end();
  return fmt::to_string(b);
}

TEST(JsonLine, NestedArraysObjectsAndNumbers) {
  unsigned grid[3] = {4, 5, 6};
  std::string s = line([&](JsonLine& j) {
    j.str("type", "latency").num("neg", -7).num("big", uint64_t{18446744073709551615ull});
    j.begin_array("buckets");
    j.begin_object().num("le_ns", 1023).num("count", 2).end_object();
    j.begin_object().num("le_ns", 2047).num("count", 0).end_object();
    j.end_array();
    j.begin_object("inner").real("rate", 12.25, 1).real("exact", 0.1).begin_array("empty").end_array().end_object();
    j.triple("grid", grid).hex("addr", 0xdeadbeef).boolean("ok", true).null("none").real("nan", NAN);
    j.begin_array("strs").str("a").str("b\"c").num(3).real(2.5, 2).end_array();
  });
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
  auto j = nlohmann::json::parse(s);
  EXPECT_EQ(j["type"], "latency");
  EXPECT_EQ(j["neg"], -7);
  EXPECT_EQ(j["big"].get<uint64_t>(), 18446744073709551615ull);
  ASSERT_EQ(j["buckets"].size(), 2u);
  EXPECT_EQ(j["buckets"][1]["le_ns"], 2047);
  EXPECT_EQ(j["buckets"][0]["count"], 2);
  EXPECT_EQ(s.find("\"rate\":12.2") != std::string::npos || s.find("\"rate\":12.3") != std::string::npos, true);
  EXPECT_DOUBLE_EQ(j["inner"]["exact"].get<double>(), 0.1);
  EXPECT_TRUE(j["inner"]["empty"].empty());
  EXPECT_EQ(j["grid"], nlohmann::json::array({4, 5, 6}));
  EXPECT_EQ(j["addr"], "0xdeadbeef");
  EXPECT_TRUE(j["none"].is_null());
  EXPECT_TRUE(j["nan"].is_null()) << "JSON has no NaN";
  EXPECT_EQ(j["strs"], nlohmann::json::parse(R"(["a","b\"c",3,2.5])"));
}

TEST(JsonLine, EveryByteGivesValidJson) {
  std::string all;
  for (int c = 0; c < 256; c++) all.push_back(static_cast<char>(c));
  auto j = nlohmann::json::parse(line([&](JsonLine& l) { l.str("name", all); }));
  std::string back = j["name"];
  // ASCII comes back as it was; bytes of no UTF-8 sequence come back as the Latin-1 character.
  for (int c = 0; c < 128; c++) EXPECT_EQ(static_cast<unsigned char>(back[c]), c);
}

TEST(JsonLine, ValidUtf8IsKeptAndBrokenSequencesAreEscaped) {
  std::string kernel = "void k<\xce\xbb>(float) \xe2\x82\xac \xf0\x9f\x9a\x80";
  auto j = nlohmann::json::parse(line([&](JsonLine& l) { l.str("kernel", kernel); }));
  EXPECT_EQ(j["kernel"], kernel);
  for (std::string bad : {"\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf8\x88\x80\x80\x80", "\xff"}) {
    std::string s = line([&](JsonLine& l) { l.str("k", "a" + bad + "z"); });
    EXPECT_NO_THROW(nlohmann::json::parse(s)) << s;
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; round++) {
    std::string r(rng() % 40, '\0');
    for (auto& c : r) c = static_cast<char>(rng());
    std::string s = line([&](JsonLine& l) { l.str(r, r); });
    EXPECT_NO_THROW(nlohmann::json::parse(s)) << s;
  }
}

}  // namespace
}  // namespace gpuscope
