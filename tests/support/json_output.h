// For the CLI tests of `--json` output: stdout must be exactly one JSON object.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace spw::test {

/// Parses stdout as exactly one JSON object (trailing whitespace allowed) or fails the test
/// (ADD_FAILURE) and returns an empty object.
inline nlohmann::json parse_one_object(const std::string& out) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(out);  // throws on anything after the object but whitespace
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON object: " << e.what() << "\n" << out;
    return nlohmann::json::object();
  }
  EXPECT_TRUE(j.is_object()) << out;
  return j;
}

}  // namespace spw::test
