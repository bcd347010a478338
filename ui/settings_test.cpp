// Widget tests of the Settings dialog and the theme: the dialog lists the models discovered in
// a fake HOME (with the loader's details), refuses an unsupported file with the loader's
// message and keeps the model in use, shows validation messages inline with OK disabled, and
// its settings round-trip through the library's SQLite settings table.
#include "ui/settings_dialog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <QApplication>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStyle>
#include <QTableWidget>

#include "app/settings/app_settings.h"
#include "tests/support/test_model.h"
#include "ui/theme.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;

QString qs(const std::string& s) { return QString::fromStdString(s); }

// A fake HOME with a usable model under llama.cpp's cache and a truncated one under LM Studio.
struct ModelHome {
  TempDir dir{"spillway-settings-ui"};
  fs::path good() const { return fs::path(dir.path()) / ".cache/llama.cpp/tiny.gguf"; }
  fs::path bad() const { return fs::path(dir.path()) / ".lmstudio/models/pub/repo/cut.gguf"; }
  fs::path elsewhere() const { return fs::path(dir.path()) / "elsewhere/other.gguf"; }

  ModelHome() {
    fs::create_directories(good().parent_path());
    fs::create_directories(bad().parent_path());
    fs::create_directories(elsewhere().parent_path());
    TestModelSpec spec;
    EXPECT_TRUE(write_test_model(spec, good().string()).ok());
    spec.seed = 7;
    EXPECT_TRUE(write_test_model(spec, elsewhere().string()).ok());
    std::ifstream in(good(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(bad(), std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  }

  SettingsDialogParams params(const QString& json = {}) const {
    SettingsDialogParams p;
    p.settings_json = json;
    p.default_data_dir = qs(dir.path() + "/data");
    p.default_cache_dir = qs(dir.path() + "/cache");
    p.discovery_env = app::DiscoveryEnv{};
    p.discovery_env.home = dir.path();
    p.apply_theme_on_ok = false;
    return p;
  }
};

// Waits for the dialog's discovery started by the constructor.
void wait_discovery(SettingsDialog& dlg, QSignalSpy& spy) {
  if (spy.isEmpty()) ASSERT_TRUE(spy.wait(20000)) << "discovery did not finish";
  ASSERT_FALSE(dlg.busy());
}

int row_of(QTableWidget* t, const QString& name) {
  for (int r = 0; r < t->rowCount(); ++r)
    if (t->item(r, SettingsDialog::kColName)->text() == name) return r;
  return -1;
}

template <typename W>
W* child(SettingsDialog& dlg, const char* name) {
  W* w = dlg.findChild<W*>(QLatin1String(name));
  EXPECT_NE(w, nullptr) << name;
  return w;
}

TEST(SettingsDialog, ListsDiscoveredModelsWithTheLoadersDetails) {
  ModelHome h;
  SettingsDialog dlg(h.params());
  QSignalSpy spy(&dlg, &SettingsDialog::discoveryFinished);
  wait_discovery(dlg, spy);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.first().first().toInt(), 2);

  QTableWidget* t = dlg.modelTable();
  ASSERT_EQ(t->rowCount(), 2);
  const int good = row_of(t, "tiny.gguf");
  const int bad = row_of(t, "pub/repo/cut.gguf");
  ASSERT_GE(good, 0);
  ASSERT_GE(bad, 0);
  EXPECT_EQ(t->item(good, SettingsDialog::kColSource)->text(), "llama.cpp");
  EXPECT_EQ(t->item(good, SettingsDialog::kColArch)->text(), "llama");
  EXPECT_EQ(t->item(good, SettingsDialog::kColQuant)->text(), "F32");
  EXPECT_EQ(t->item(good, SettingsDialog::kColContext)->text(), "256");
  EXPECT_EQ(t->item(good, SettingsDialog::kColKv)->text(), "256 bytes");
  EXPECT_TRUE(t->item(good, SettingsDialog::kColSize)->text().endsWith("KiB"))
      << t->item(good, SettingsDialog::kColSize)->text().toStdString();
  EXPECT_FALSE(t->item(good, SettingsDialog::kColSize)->text().isEmpty());
  EXPECT_EQ(t->item(good, SettingsDialog::kColStatus)->text(), "usable");

  const std::string loader_message = app::describe_model_file(h.bad().string()).error;
  ASSERT_FALSE(loader_message.empty());
  EXPECT_EQ(t->item(bad, SettingsDialog::kColSource)->text(), "LM Studio");
  // The reason in the cell (the path it starts with is in the tooltip), the whole message in
  // the tooltip.
  const std::string prefix = h.bad().string() + ": ";
  ASSERT_EQ(loader_message.rfind(prefix, 0), 0u) << loader_message;
  EXPECT_EQ(t->item(bad, SettingsDialog::kColStatus)->text(),
            "unsupported: " + qs(loader_message.substr(prefix.size())));
  EXPECT_TRUE(t->item(bad, SettingsDialog::kColStatus)->toolTip().contains(qs(loader_message)));

  // Choosing the usable row makes it the model in use; the unsupported row is refused with the
  // loader's message and the model stays.
  dlg.selectModelRow(good);
  EXPECT_EQ(dlg.modelPath(), qs(h.good().string()));
  EXPECT_EQ(t->item(good, SettingsDialog::kColStatus)->text(), "in use");
  EXPECT_TRUE(dlg.modelError().isEmpty());
  t->selectRow(bad);  // as a click would
  EXPECT_EQ(dlg.modelPath(), qs(h.good().string()));
  EXPECT_TRUE(dlg.modelError().contains(qs(loader_message))) << dlg.modelError().toStdString();
}

TEST(SettingsDialog, SharedStoriesModelInAHuggingFaceSnapshotIsListed) {
  const fs::path model = fs::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model << " (../shared is not here)";
  TempDir home("spillway-settings-shared");
  const fs::path snap =
      fs::path(home.path()) / ".cache/huggingface/hub/models--karpathy--tinyllamas/snapshots/r1";
  fs::create_directories(snap);
  fs::create_symlink(fs::absolute(model), snap / "stories260K.gguf");
  SettingsDialogParams p;
  p.discovery_env.home = home.path();
  p.apply_theme_on_ok = false;
  SettingsDialog dlg(p);
  QSignalSpy spy(&dlg, &SettingsDialog::discoveryFinished);
  wait_discovery(dlg, spy);
  QTableWidget* t = dlg.modelTable();
  ASSERT_EQ(t->rowCount(), 1);
  EXPECT_EQ(t->item(0, SettingsDialog::kColName)->text(), "karpathy/tinyllamas: stories260K.gguf");
  EXPECT_EQ(t->item(0, SettingsDialog::kColSource)->text(), "Hugging Face");
  EXPECT_EQ(t->item(0, SettingsDialog::kColArch)->text(), "llama");
  EXPECT_EQ(t->item(0, SettingsDialog::kColContext)->text(), QLocale().toString(2048));
  // 5 layers x (K + V) x 4 KV heads x head_dim 8 x 2 bytes.
  EXPECT_EQ(t->item(0, SettingsDialog::kColKv)->text(), "640 bytes");
  EXPECT_EQ(t->item(0, SettingsDialog::kColStatus)->text(), "usable");
  dlg.selectModelRow(0);
  EXPECT_EQ(dlg.modelPath(), qs((snap / "stories260K.gguf").string()));
}

TEST(SettingsDialog, ChooseFileRefusesABadFileAndKeepsTheModel) {
  ModelHome h;
  SettingsDialog dlg(h.params());
  QSignalSpy found(&dlg, &SettingsDialog::discoveryFinished);
  wait_discovery(dlg, found);
  QSignalSpy probed(&dlg, &SettingsDialog::modelProbed);

  dlg.chooseModelFile(qs(h.elsewhere().string()));
  ASSERT_TRUE(probed.wait(20000));
  EXPECT_EQ(probed.last().at(1).toBool(), true);
  EXPECT_EQ(dlg.modelPath(), qs(h.elsewhere().string()));
  EXPECT_EQ(dlg.modelTable()->rowCount(), 3);  // the chosen file joins the list
  const int chosen = row_of(dlg.modelTable(), "other.gguf");
  ASSERT_GE(chosen, 0);
  EXPECT_EQ(dlg.modelTable()->item(chosen, SettingsDialog::kColSource)->text(), "chosen file");

  dlg.chooseModelFile(qs(h.bad().string()));
  ASSERT_TRUE(probed.wait(20000));
  EXPECT_EQ(probed.last().at(1).toBool(), false);
  EXPECT_EQ(dlg.modelPath(), qs(h.elsewhere().string()));
  const std::string loader_message = app::describe_model_file(h.bad().string()).error;
  EXPECT_TRUE(dlg.modelError().contains(qs(loader_message))) << dlg.modelError().toStdString();

  // A file that is not there at all.
  dlg.chooseModelFile(qs(h.dir.path() + "/missing.gguf"));
  ASSERT_TRUE(probed.wait(20000));
  EXPECT_EQ(probed.last().at(1).toBool(), false);
  EXPECT_TRUE(dlg.modelError().contains("missing.gguf"));
  EXPECT_EQ(dlg.modelPath(), qs(h.elsewhere().string()));
}

TEST(SettingsDialog, ValidationIsShownInlineAndBlocksOk) {
  ModelHome h;
  SettingsDialogParams p = h.params();
  p.discover_on_open = false;
  p.default_cache_dir.clear();  // no folder for a spill file
  SettingsDialog dlg(p);
  QPushButton* ok = child<QDialogButtonBox>(dlg, "buttons")->button(QDialogButtonBox::Ok);
  EXPECT_TRUE(dlg.validationMessage().isEmpty()) << dlg.validationMessage().toStdString();
  EXPECT_TRUE(ok->isEnabled());

  QLineEdit* host = child<QLineEdit>(dlg, "hostBudget");
  host->setText("lots");
  EXPECT_TRUE(dlg.validationMessage().startsWith("Host RAM budget: invalid size 'lots'"))
      << dlg.validationMessage().toStdString();
  EXPECT_FALSE(ok->isEnabled());
  host->setText("8G");
  EXPECT_TRUE(dlg.validationMessage().isEmpty());
  EXPECT_TRUE(ok->isEnabled());

  // validate()'s own message, with the dialog's field name for the CLI option.
  QLineEdit* disk = child<QLineEdit>(dlg, "diskBudget");
  disk->setText("64G");
  EXPECT_TRUE(dlg.validationMessage().startsWith("Disk budget needs a folder"))
      << dlg.validationMessage().toStdString();
  EXPECT_FALSE(ok->isEnabled());
  QSignalSpy changed(&dlg, &SettingsDialog::settingsChanged);
  dlg.accept();  // refused while invalid
  EXPECT_EQ(changed.count(), 0);
  EXPECT_EQ(dlg.result(), QDialog::Rejected);

  child<QLineEdit>(dlg, "spillDir")->setText(qs(h.dir.path()));
  EXPECT_TRUE(dlg.validationMessage().isEmpty()) << dlg.validationMessage().toStdString();
  child<QLineEdit>(dlg, "dataDir")->setText("relative/folder");
  EXPECT_TRUE(dlg.validationMessage().contains("data folder"))
      << dlg.validationMessage().toStdString();
}

TEST(SettingsDialog, OkEmitsTheSettingsAndTheyRoundTripThroughSqlite) {
  ModelHome h;
  QString json;
  {
    SettingsDialog dlg(h.params());
    QSignalSpy found(&dlg, &SettingsDialog::discoveryFinished);
    wait_discovery(dlg, found);
    dlg.selectModelRow(row_of(dlg.modelTable(), "tiny.gguf"));
    child<QSpinBox>(dlg, "contextLength")->setValue(8192);
    child<QSpinBox>(dlg, "kvWindow")->setValue(2048);
    child<QSpinBox>(dlg, "kvSinks")->setValue(16);
    auto* k = child<QComboBox>(dlg, "kvTypeK");
    k->setCurrentIndex(k->findData("q8_0"));
    auto* v = child<QComboBox>(dlg, "kvTypeV");
    v->setCurrentIndex(v->findData("f32"));
    child<QLineEdit>(dlg, "hostBudget")->setText("6G");
    child<QLineEdit>(dlg, "diskBudget")->setText("32G");
    child<QSpinBox>(dlg, "threads")->setValue(3);
    auto* dev = child<QComboBox>(dlg, "device");
    dev->setCurrentIndex(dev->findData("cpu"));
    auto* att = child<QComboBox>(dlg, "attention");
    EXPECT_EQ(att->currentData().toString(), "exact");  // the default
    EXPECT_TRUE(att->itemText(att->findData("streaming")).contains("approximate"));
    EXPECT_TRUE(att->itemText(att->findData("topk")).contains("approximate"));
    att->setCurrentIndex(att->findData("topk"));
    child<QSpinBox>(dlg, "topkBlocks")->setValue(12);
    child<QLineEdit>(dlg, "cacheDir")->setText(qs(h.dir.path() + "/mycache"));
    auto* theme = child<QComboBox>(dlg, "theme");
    theme->setCurrentIndex(theme->findData("dark"));

    QSignalSpy changed(&dlg, &SettingsDialog::settingsChanged);
    ASSERT_TRUE(dlg.validationMessage().isEmpty()) << dlg.validationMessage().toStdString();
    dlg.accept();
    ASSERT_EQ(changed.count(), 1);
    EXPECT_EQ(dlg.result(), QDialog::Accepted);
    json = changed.first().first().toString();
  }
  auto s = app::app_settings_from_json(json.toStdString());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->engine.model_path, h.good().string());
  EXPECT_EQ(s->engine.n_ctx, 8192);
  EXPECT_EQ(s->engine.kv.window_tokens, 2048);
  EXPECT_EQ(s->engine.kv.n_sinks, 16);
  EXPECT_EQ(s->engine.kv_type_k, "q8_0");
  EXPECT_EQ(s->engine.kv_type_v, "f32");
  EXPECT_EQ(s->engine.kv.host_budget, int64_t{6} << 30);
  EXPECT_EQ(s->engine.kv.disk_budget, int64_t{32} << 30);
  EXPECT_EQ(s->engine.kv.spill_dir, h.dir.path() + "/mycache");  // the cache folder
  EXPECT_EQ(s->engine.n_threads, 3);
  EXPECT_EQ(s->engine.device, "cpu");
  EXPECT_EQ(app::attention_text(s->engine), "topk:12");
  EXPECT_EQ(s->cache_dir, h.dir.path() + "/mycache");
  EXPECT_EQ(s->theme, "dark");

  // Into SQLite, the library closed and reopened, and back into a new dialog: the same values.
  const fs::path data = fs::path(h.dir.path()) / "data";
  fs::create_directories(data);
  {
    auto lib = app::Library::open(app::library_db_file(data));
    ASSERT_TRUE(lib.ok()) << lib.error().message;
    ASSERT_TRUE(app::save_app_settings(**lib, *s).ok());
  }
  auto lib = app::Library::open(app::library_db_file(data));
  ASSERT_TRUE(lib.ok()) << lib.error().message;
  auto loaded = app::load_app_settings(**lib);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(*loaded == *s);

  SettingsDialogParams p = h.params(qs(app::app_settings_to_json(*loaded)));
  p.discover_on_open = false;
  SettingsDialog again(p);
  EXPECT_EQ(child<QSpinBox>(again, "contextLength")->value(), 8192);
  EXPECT_EQ(child<QLineEdit>(again, "hostBudget")->text(), "6 GiB");
  EXPECT_EQ(child<QComboBox>(again, "attention")->currentData().toString(), "topk");
  EXPECT_EQ(child<QSpinBox>(again, "topkBlocks")->value(), 12);
  EXPECT_EQ(again.modelPath(), qs(h.good().string()));
  auto reread = app::app_settings_from_json(again.currentJson().toStdString());
  ASSERT_TRUE(reread.ok());
  EXPECT_TRUE(*reread == *s) << again.currentJson().toStdString();
}

TEST(SettingsDialog, UnreadableStoredSettingsShowTheDefaultsWithANote) {
  ModelHome h;
  SettingsDialogParams p = h.params(R"({"engine": {"n_ctx": "huge"}})");
  p.discover_on_open = false;
  SettingsDialog dlg(p);
  auto* note = child<QLabel>(dlg, "loadNote");
  EXPECT_TRUE(note->text().contains("n_ctx")) << note->text().toStdString();
  EXPECT_EQ(child<QSpinBox>(dlg, "contextLength")->value(), 0);
  EXPECT_TRUE(dlg.modelPath().isEmpty());
}

TEST(SettingsDialog, ClosingDuringDiscoveryDoesNotHang) {
  ModelHome h;
  auto* dlg = new SettingsDialog(h.params());
  delete dlg;  // cancels and joins the worker
  SUCCEED();
}

TEST(Theme, PalettesApplyToTheApplication) {
  auto* app = qobject_cast<QApplication*>(QCoreApplication::instance());
  ASSERT_NE(app, nullptr);
  apply_theme(*app, QStringLiteral("dark"));
  EXPECT_LT(QApplication::palette().color(QPalette::Window).lightness(), 80);
  EXPECT_GT(QApplication::palette().color(QPalette::WindowText).lightness(), 180);
  EXPECT_EQ(QApplication::style()->name().toLower(), "fusion");
  apply_theme(*app, QStringLiteral("light"));
  EXPECT_GT(QApplication::palette().color(QPalette::Window).lightness(), 200);
  EXPECT_LT(QApplication::palette().color(QPalette::WindowText).lightness(), 80);
  apply_theme(*app, QStringLiteral("system"));
  EXPECT_EQ(QApplication::palette().color(QPalette::Window),
            theme_palette(Theme::System).color(QPalette::Window));
  EXPECT_EQ(parse_theme("Dark"), Theme::Dark);
  EXPECT_EQ(parse_theme("bogus"), Theme::System);
  EXPECT_EQ(theme_name(Theme::Light), "light");
}

}  // namespace
}  // namespace spw::ui
