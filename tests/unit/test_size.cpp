// Byte sizes as users type them (--ram 16G, --host-budget 8K): all units powers of 1024.
#include <gtest/gtest.h>

#include <string>

#include "engine/common/size.h"

namespace spw {
namespace {

int64_t size_of(const std::string& s) {
  auto v = parse_size(s);
  EXPECT_TRUE(v.ok()) << s << ": " << (v.ok() ? "" : v.error().message);
  return v.ok() ? *v : -1;
}

void expect_refused(const std::string& s) {
  auto v = parse_size(s);
  ASSERT_FALSE(v.ok()) << "'" << s << "' was accepted as " << *v;
  EXPECT_NE(v.error().message.find("'" + s + "'"), std::string::npos)
      << "the message names the text: " << v.error().message;
}

TEST(ParseSize, PlainBytes) {
  EXPECT_EQ(size_of("4096"), 4096);
  EXPECT_EQ(size_of("0"), 0);
  EXPECT_EQ(size_of("100B"), 100);
  EXPECT_EQ(size_of(" 4096 "), 4096);
}

TEST(ParseSize, UnitsArePowersOf1024) {
  EXPECT_EQ(size_of("8K"), 8 * 1024);
  EXPECT_EQ(size_of("8k"), 8 * 1024);
  EXPECT_EQ(size_of("8KB"), 8 * 1024);
  EXPECT_EQ(size_of("8KiB"), 8 * 1024);
  EXPECT_EQ(size_of("1M"), 1048576);
  EXPECT_EQ(size_of("1M"), size_of("1MiB"));
  EXPECT_EQ(size_of("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(size_of("2G"), int64_t{2} << 30);
  EXPECT_EQ(size_of("1T"), int64_t{1} << 40);
}

TEST(ParseSize, Fractions) {
  EXPECT_EQ(size_of("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(size_of("0.5K"), 512);
  EXPECT_EQ(size_of("1.5 KiB"), 1536);
}

TEST(ParseSize, GarbageIsRefused) {
  for (const char* s : {"", "abc", "12Q", "K", "1.2.3", "1e3", "8 KiBs", "MiB8", "nan", "inf"}) {
    SCOPED_TRACE(s);
    expect_refused(s);
  }
}

TEST(ParseSize, NegativeIsRefused) {
  expect_refused("-1");
  expect_refused("-8K");
}

TEST(ParseSize, OverflowIsRefused) {
  expect_refused("9999999T");
  expect_refused("99999999999999999999");
  expect_refused("8388608T");  // 2^63 bytes
  EXPECT_EQ(size_of("1048576T"), int64_t{1} << 60);
}

TEST(FormatSize, PicksTheUnit) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(100), "100 B");
  EXPECT_EQ(format_size(1023), "1023 B");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_size(8388608), "8.0 MiB");
  EXPECT_EQ(format_size(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(format_size(int64_t{2} << 40), "2.0 TiB");
  EXPECT_EQ(format_size(int64_t{4096} << 40), "4096.0 TiB");
}

TEST(FormatSize, RoundTripsThroughParse) {
  for (const int64_t v : {int64_t{1536}, int64_t{8} << 20, int64_t{3} << 29}) {
    std::string s = format_size(v);
    EXPECT_EQ(size_of(s), v) << s;
  }
}

}  // namespace
}  // namespace spw
