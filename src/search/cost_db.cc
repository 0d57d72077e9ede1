#include "search/cost_db.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "collage/error.h"
#include "ir/canonical.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// Finalizes a statement on every exit path.
struct Statement {
  sqlite3_stmt* stmt = nullptr;
  Statement(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) != SQLITE_OK)
      fail(ErrorKind::kIo, "cost database: {} ({})", sqlite3_errmsg(db), sql);
  }
  ~Statement() { sqlite3_finalize(stmt); }
  void bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt, i, s.c_str(), -1, SQLITE_TRANSIENT);
  }
  void bind(int i, double d) { sqlite3_bind_double(stmt, i, d); }
  void bind(int i, int64_t v) { sqlite3_bind_int64(stmt, i, v); }
};

}  // namespace

std::string CostDb::default_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base = xdg && *xdg ? fs::path(xdg) : fs::path(home && *home ? home : ".") / ".cache";
  return (base / "collage" / "costs.db").string();
}

std::string CostDb::make_key(const std::string& canonical_subgraph, const std::string& backend,
                             const std::string& backend_version, const std::string& hardware) {
  return digest(canonical_subgraph) + "|" + backend + "|" + backend_version + "|" +
         digest(hardware);
}

CostDb::CostDb(const std::string& path) : path_(path) {
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (open_and_check()) return;
  // Unusable file: keep it for inspection, start afresh.
  if (db_) sqlite3_close(db_);
  db_ = nullptr;
  auto stamp = std::chrono::system_clock::now().time_since_epoch().count();
  moved_aside_to_ = path + ".unusable-" + std::to_string(stamp);
  fs::rename(path, moved_aside_to_, ec);
  for (const char* suffix : {"-wal", "-shm"}) fs::remove(path + suffix, ec);
  spdlog::warn(
      "cost database {} was corrupt or not collage's; moved it to {} and started a new one", path,
      moved_aside_to_);
  if (!open_and_check())
    fail(ErrorKind::kIo, "cannot create a cost database at {}: {}", path,
         db_ ? sqlite3_errmsg(db_) : "open failed");
}

CostDb::~CostDb() {
  if (db_) sqlite3_close(db_);
}

void CostDb::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string message = err ? err : "unknown error";
    sqlite3_free(err);
    fail(ErrorKind::kIo, "cost database {}: {}", path_, message);
  }
}

bool CostDb::open_and_check() {
  if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK)
    return false;
  // Two tuners on one file wait for each other instead of failing with SQLITE_BUSY.
  sqlite3_busy_timeout(db_, 30000);
  try {
    int version = -1;
    {
      Statement s(db_, "PRAGMA user_version");  // fails with SQLITE_NOTADB on a non-database
      if (sqlite3_step(s.stmt) == SQLITE_ROW) version = sqlite3_column_int(s.stmt, 0);
    }
    {
      Statement s(db_, "PRAGMA quick_check");
      if (sqlite3_step(s.stmt) != SQLITE_ROW ||
          std::string(reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0))) != "ok")
        return false;
    }
    int tables = 0;
    {
      Statement s(db_, "SELECT count(*) FROM sqlite_master WHERE type='table'");
      if (sqlite3_step(s.stmt) == SQLITE_ROW) tables = sqlite3_column_int(s.stmt, 0);
    }
    if (version == 0 && tables > 0) return false;  // someone else's database
    // Our version number alone proves little (user_version is any app's to set): a `costs`
    // table of other columns would only fail at the first write, mid-tuning.
    if (version == 1)
      Statement columns(db_,
                        "SELECT key, backend, hardware, subgraph, cost_ms, ok, reason FROM costs");
    if (version == kSchemaVersion)
      Statement columns(
          db_, "SELECT key, backend, hardware, subgraph, cost_ms, ok, reason, spent_s FROM costs");
    if (version > kSchemaVersion) {
      spdlog::warn("cost database {} has schema {} (newer than this collage's {})", path_, version,
                   kSchemaVersion);
      return false;
    }
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    if (version == 0) create_schema();
    if (version == 1) migrate_from_1();
  } catch (const Error&) {
    return false;
  }
  return true;
}

void CostDb::create_schema() {
  exec("BEGIN IMMEDIATE");
  exec(
      "CREATE TABLE IF NOT EXISTS costs ("
      " key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
      " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
      " measured_at TEXT DEFAULT CURRENT_TIMESTAMP, spent_s REAL DEFAULT 0)");
  exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion).c_str());
  exec("COMMIT");
}

// Version 1 had no spent_s: its rows read 0 (unknown), nothing is re-measured.
void CostDb::migrate_from_1() {
  exec("BEGIN IMMEDIATE");
  exec("ALTER TABLE costs ADD COLUMN spent_s REAL DEFAULT 0");
  exec("PRAGMA user_version = 2");
  exec("COMMIT");
}

std::optional<CostRecord> CostDb::find(const std::string& key) const {
  Statement s(db_, "SELECT cost_ms, ok, reason, spent_s FROM costs WHERE key = ?");
  s.bind(1, key);
  if (sqlite3_step(s.stmt) != SQLITE_ROW) return std::nullopt;
  CostRecord r;
  r.ok = sqlite3_column_int(s.stmt, 1) != 0;
  r.milliseconds =
      r.ok ? sqlite3_column_double(s.stmt, 0) : std::numeric_limits<double>::infinity();
  const unsigned char* reason = sqlite3_column_text(s.stmt, 2);
  r.reason = reason ? reinterpret_cast<const char*>(reason) : "";
  r.spent_s = sqlite3_column_double(s.stmt, 3);
  return r;
}

void CostDb::put(const std::string& key, const std::string& backend, const std::string& hardware,
                 const std::string& subgraph_text, const CostRecord& record) {
  Statement s(db_,
              "INSERT OR REPLACE INTO costs"
              " (key, backend, hardware, subgraph, cost_ms, ok, reason, spent_s)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, key);
  s.bind(2, backend);
  s.bind(3, hardware);
  s.bind(4, subgraph_text);
  s.bind(5, std::isfinite(record.milliseconds) ? record.milliseconds : -1.0);
  s.bind(6, static_cast<int64_t>(record.ok ? 1 : 0));
  s.bind(7, record.reason);
  s.bind(8, record.spent_s);
  if (sqlite3_step(s.stmt) != SQLITE_DONE)
    fail(ErrorKind::kIo, "cost database {}: {}", path_, sqlite3_errmsg(db_));
}

int64_t CostDb::size() const {
  Statement s(db_, "SELECT count(*) FROM costs");
  return sqlite3_step(s.stmt) == SQLITE_ROW ? sqlite3_column_int64(s.stmt, 0) : 0;
}

int64_t CostDb::size(const std::string& backend) const {
  Statement s(db_, "SELECT count(*) FROM costs WHERE backend = ?");
  sqlite3_bind_text(s.stmt, 1, backend.c_str(), -1, SQLITE_TRANSIENT);
  return sqlite3_step(s.stmt) == SQLITE_ROW ? sqlite3_column_int64(s.stmt, 0) : 0;
}

}  // namespace collage
