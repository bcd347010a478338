// The Jobs dock's documents table (see job_documents.h).
#include "ui/job_documents.h"

#include <algorithm>

#include <QDateTime>
#include <QHeaderView>
#include <QLocale>
#include <QProgressBar>
#include <QStringList>

namespace spw::ui {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }
// Grouped as the CLI's `jobs show` and the chat's progress line write them: "1,024".
QString num(int64_t n) { return QLocale(QLocale::English).toString(static_cast<qlonglong>(n)); }

}  // namespace

QString document_where_text(const app::JobDocumentProgress& p) {
  QStringList bits;
  if (p.n_prompts > 1) bits << QObject::tr("prompt %1 of %2").arg(p.prompt + 1).arg(p.n_prompts);
  if (p.n_parts > 0) {
    if (p.part > p.n_parts)
      bits << QObject::tr("combining %1 parts").arg(p.n_parts);
    else
      bits << QObject::tr("part %1 of %2 (%3 done)")
                  .arg(std::max(p.part, 1))
                  .arg(p.n_parts)
                  .arg(p.parts_done);
  }
  if ((p.phase == "prefill" || p.phase == "decode") && p.tokens_done > 0) {
    const QString phase = p.phase == "prefill" ? QObject::tr("prefill") : QObject::tr("decode");
    bits
        << (p.tokens_total > 0
                ? QObject::tr("%1 %2/%3 tokens").arg(phase, num(p.tokens_done), num(p.tokens_total))
                : QObject::tr("%1 %2 tokens").arg(phase, num(p.tokens_done)));
  }
  return bits.join(QStringLiteral(", "));
}

double document_progress_fraction(const app::JobDocumentProgress& p) {
  if (!p.known) return 0;
  const bool tokens_phase = p.phase == "prefill" || p.phase == "decode";
  const double inner =
      tokens_phase && p.tokens_total > 0
          ? std::clamp(static_cast<double>(p.tokens_done) / static_cast<double>(p.tokens_total),
                       0.0, 1.0)
          : 0.0;
  double prompt_fraction = inner;
  if (p.n_parts > 0) {
    const int done = std::clamp(p.parts_done, 0, p.n_parts);
    // While the parts' answers are combined every part is done: the bar stays just short of
    // full until the document is.
    prompt_fraction =
        p.part > p.n_parts ? 0.99 : std::min(1.0, (done + inner) / static_cast<double>(p.n_parts));
  }
  const int n_prompts = std::max(1, p.n_prompts);
  const int prompt = std::clamp(p.prompt, 0, n_prompts - 1);
  return (prompt + prompt_fraction) / n_prompts;
}

int64_t job_lease_ms(const app::JobRecord& job) {
  if (job.lease_heartbeat_ms > 0 && job.lease_expires_ms > job.lease_heartbeat_ms)
    return job.lease_expires_ms - job.lease_heartbeat_ms;
  return app::RunnerOptions{}.lease_ms;
}

int64_t document_silence_ms(const app::JobRecord& job, const app::JobDocument& doc,
                            int64_t now_ms) {
  if (doc.state != app::DocState::Running) return -1;
  int64_t last = std::max(doc.started_ms, doc.progress.known ? doc.progress.updated_ms : 0);
  // The heartbeat is the runner's too, but only while the lease is the document's claim's.
  if (!job.lease_owner.empty() && job.lease_owner == doc.owner)
    last = std::max(last, job.lease_heartbeat_ms);
  return last > 0 ? std::max<int64_t>(0, now_ms - last) : -1;
}

JobDocumentsTable::JobDocumentsTable(QWidget* parent) : QTableWidget(0, kColCount, parent) {
  setObjectName(QStringLiteral("jobDocumentsTable"));
  setHorizontalHeaderLabels(
      {tr("Document"), tr("State"), tr("Where"), tr("Progress"), tr("ETA"), tr("Updated")});
  setSelectionMode(QAbstractItemView::NoSelection);
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  setFocusPolicy(Qt::NoFocus);
  verticalHeader()->hide();
  horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  horizontalHeader()->setSectionResizeMode(kColTitle, QHeaderView::Stretch);
  horizontalHeader()->setSectionResizeMode(kColProgress, QHeaderView::Fixed);
  horizontalHeader()->resizeSection(kColProgress, 120);
  horizontalHeader()->setStretchLastSection(true);
}

JobDocumentsTable::~JobDocumentsTable() = default;

QProgressBar* JobDocumentsTable::progressBar(int row) const {
  if (row < 0 || row >= rowCount()) return nullptr;
  return qobject_cast<QProgressBar*>(cellWidget(row, kColProgress));
}

void JobDocumentsTable::clearDocuments() {
  job_id_ = 0;
  setRowCount(0);
}

void JobDocumentsTable::showDocuments(const app::JobRecord& job,
                                      const std::vector<app::JobDocument>& docs, int64_t now_ms) {
  job_id_ = job.id;
  setRowCount(static_cast<int>(docs.size()));
  const int64_t lease_ms = job_lease_ms(job);
  for (int row = 0; row < static_cast<int>(docs.size()); ++row) {
    const app::JobDocument& d = docs[static_cast<size_t>(row)];
    const app::JobDocumentProgress& p = d.progress;
    const bool running = d.state == app::DocState::Running;

    QString where;
    if (d.state == app::DocState::Done) {
      where = d.n_parts > 0 ? tr("%1 parts").arg(d.n_parts) : QString();
      if (d.parts_kept > 0) where += tr(" (%1 kept from an earlier run)").arg(d.parts_kept);
    } else if (d.state == app::DocState::Failed) {
      where = qs(d.reason);
    } else if (p.known) {
      where = document_where_text(p);
      if (!running && !where.isEmpty()) where = tr("stopped at %1").arg(where);
    }

    QString updated;
    const int64_t silence = document_silence_ms(job, d, now_ms);
    const bool stale = running && silence > lease_ms;
    if (stale)
      updated = tr("its runner has not reported for %1 s").arg((silence + 500) / 1000);
    else if (p.known && p.updated_ms > 0)
      updated = QDateTime::fromMSecsSinceEpoch(p.updated_ms).toString(QStringLiteral("HH:mm:ss"));

    const QString eta = running && !stale && p.known && p.eta_s >= 0
                            ? QString::fromStdString(app::format_eta(p.eta_s))
                            : QString();
    QString state = QString::fromLatin1(app::doc_state_name(d.state));
    if (d.attempts > 1) state += tr(" (attempt %1)").arg(d.attempts);

    const QStringList cells = {qs(d.title), state, where, QString(), eta, updated};
    for (int col = 0; col < kColCount; ++col) {
      QTableWidgetItem* item = this->item(row, col);
      if (item == nullptr) {
        item = new QTableWidgetItem;
        setItem(row, col, item);
      }
      item->setText(cells[col]);
      item->setToolTip(col == kColUpdated && stale
                           ? tr("No progress or lease heartbeat for longer than the lease (%1 s): "
                                "the runner has stopped or hangs. Another runner takes the "
                                "document over once the lease has expired.")
                                 .arg(lease_ms / 1000)
                           : cells[col]);
      if (col == kColTitle) item->setData(Qt::UserRole, QVariant::fromValue<qlonglong>(d.doc_id));
    }

    auto* bar = progressBar(row);
    if (bar == nullptr) {
      bar = new QProgressBar;
      bar->setObjectName(QStringLiteral("jobDocumentProgress"));
      bar->setRange(0, 1000);
      bar->setTextVisible(true);
      setCellWidget(row, kColProgress, bar);
    }
    const double fraction = d.state == app::DocState::Done ? 1.0 : document_progress_fraction(p);
    bar->setValue(static_cast<int>(fraction * 1000 + 0.5));
    bar->setFormat(QStringLiteral("%1%").arg(static_cast<int>(fraction * 100)));
    bar->setEnabled(running && !stale);
  }
}

}  // namespace spw::ui
