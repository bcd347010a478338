// Tests of app/settings: the user's settings round-trip through the library's SQLite settings
// table (saved, the Library closed and reopened, loaded equal), defaults, validation and the
// budget text the Settings dialog shows.
#include "app/settings/app_settings.h"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <string>

#include "app/store/test_temp_dir.h"

namespace spw::app {
namespace {

using testing::TempDir;

std::string stored_value(const std::filesystem::path& db_file, const std::string& key) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT value FROM settings WHERE key = ?1", -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  std::string v;
  if (sqlite3_step(st) == SQLITE_ROW) v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

AppSettings non_default() {
  AppSettings s;
  s.engine.model_path = "/models/qwen2.5-7b-instruct-q4_k_m.gguf";
  s.engine.n_ctx = 32768;
  s.engine.n_threads = 6;
  s.engine.kv_type_k = "q8_0";
  s.engine.kv_type_v = "f32";
  s.engine.device = "cpu";
  s.engine.kv.window_tokens = 8192;
  s.engine.kv.n_sinks = 8;
  s.engine.kv.host_budget = int64_t{12} << 30;
  s.engine.kv.disk_budget = int64_t{64} << 30;
  s.engine.kv.spill_dir = "/var/tmp/spill";
  EXPECT_TRUE(set_attention(s.engine, "topk:8").ok());
  s.data_dir = "/srv/spillway";
  s.cache_dir = "/var/cache/spillway";
  s.theme = "dark";
  return s;
}

TEST(AppSettings, RoundTripThroughSqlite) {
  TempDir dir;
  const auto db = library_db_file(dir.path());
  const AppSettings saved = non_default();
  ASSERT_TRUE(validate(saved).ok()) << validate(saved).error().message;
  {
    auto lib = Library::open(db);
    ASSERT_TRUE(lib.ok()) << lib.error().message;
    const Status st = save_app_settings(**lib, saved);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }
  // One row under the key, holding the engine settings as a nested object.
  const std::string row = stored_value(db, kAppSettingsKey);
  EXPECT_NE(row.find(R"("theme":"dark")"), std::string::npos) << row;
  EXPECT_NE(row.find(R"("kv_type_k":"q8_0")"), std::string::npos) << row;
  EXPECT_NE(row.find(R"("host_budget":12884901888)"), std::string::npos) << row;

  auto lib = Library::open(db);
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  auto loaded = load_app_settings(**lib);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(*loaded == saved) << app_settings_to_json(*loaded);
  EXPECT_EQ(loaded->engine.kv.host_budget, int64_t{12} << 30);
  EXPECT_EQ(attention_text(loaded->engine), "topk:8");
  EXPECT_EQ(loaded->theme, "dark");

  // Saving again replaces the row.
  AppSettings changed = saved;
  changed.theme = "light";
  ASSERT_TRUE(save_app_settings(**lib, changed).ok());
  loaded = load_app_settings(**lib);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->theme, "light");
}

TEST(AppSettings, DefaultsWhenNothingIsStored) {
  TempDir dir;
  auto lib = Library::open(library_db_file(dir.path()));
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  auto s = load_app_settings(**lib);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(*s == AppSettings{});
  EXPECT_EQ(s->theme, "system");
  EXPECT_EQ(s->engine.kv_type_k, "f16");
  EXPECT_EQ(attention_text(s->engine), "exact");
  EXPECT_EQ(s->engine.kv.host_budget, -1);
  EXPECT_TRUE(validate(*s).ok());
}

TEST(AppSettings, MissingKeysKeepDefaultsUnknownKeysIgnored) {
  auto s = app_settings_from_json(R"({"theme":"light","future":1,"engine":{"n_ctx":4096}})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->theme, "light");
  EXPECT_EQ(s->engine.n_ctx, 4096);
  EXPECT_EQ(kv_window_text(s->engine), "auto");  // missing: the default
  EXPECT_EQ(s->engine.kv_type_v, "f16");
  EXPECT_TRUE(s->data_dir.empty());
}

TEST(AppSettings, BadStoredTextIsAnErrorAndKeepsTheRow) {
  TempDir dir;
  const auto db = library_db_file(dir.path());
  auto lib = Library::open(db);
  ASSERT_TRUE(lib.ok());
  ASSERT_TRUE((*lib)->set_setting(kAppSettingsKey, R"({"theme": 3})").ok());
  auto s = load_app_settings(**lib);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("'theme' must be a string"), std::string::npos)
      << s.error().message;
  EXPECT_EQ(stored_value(db, kAppSettingsKey), R"({"theme": 3})");

  EXPECT_FALSE(app_settings_from_json("not json").ok());
  EXPECT_FALSE(app_settings_from_json("[1]").ok());
  auto e = app_settings_from_json(R"({"engine":{"n_ctx":"big"}})");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("n_ctx"), std::string::npos) << e.error().message;
}

TEST(AppSettings, ValidateNamesTheField) {
  AppSettings s;
  s.theme = "sepia";
  ASSERT_FALSE(validate(s).ok());
  EXPECT_EQ(validate(s).error().message, "theme: 'sepia' is not one of system, light, dark");
  s = {};
  s.data_dir = "relative/dir";
  ASSERT_FALSE(validate(s).ok());
  EXPECT_NE(validate(s).error().message.find("data folder"), std::string::npos);
  s = {};
  s.engine.kv_type_k = "q4_0";
  ASSERT_FALSE(validate(s).ok());
  EXPECT_NE(validate(s).error().message.find("--cache-type-k"), std::string::npos)
      << validate(s).error().message;
}

TEST(AppSettings, BudgetText) {
  EXPECT_EQ(*parse_budget("", -1), -1);
  EXPECT_EQ(*parse_budget(" no limit ", -1), -1);
  EXPECT_EQ(*parse_budget("8G", -1), int64_t{8} << 30);
  EXPECT_EQ(*parse_budget("512 MiB", -1), int64_t{512} << 20);
  EXPECT_EQ(*parse_budget("0", 0), 0);
  EXPECT_EQ(*parse_budget("4096", 0), 4096);
  auto bad = parse_budget("lots", -1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'lots'"), std::string::npos) << bad.error().message;

  EXPECT_EQ(format_budget(-1, "no limit", false), "no limit");
  EXPECT_EQ(format_budget(0, "none", true), "none");
  EXPECT_EQ(format_budget(int64_t{8} << 30, "", false), "8 GiB");
  EXPECT_EQ(format_budget(int64_t{1536} << 20, "", false), "1536 MiB");
  EXPECT_EQ(format_budget(1000, "", false), "1000");
  // What is shown parses back to the same bytes.
  for (int64_t b : {int64_t{3} << 40, int64_t{1536} << 20, int64_t{4097}})
    EXPECT_EQ(*parse_budget(format_budget(b, "", false), -1), b);
}

}  // namespace
}  // namespace spw::app
