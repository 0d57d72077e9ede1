#include "search/cost_db.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "collage/error.h"
#include "ir/canonical.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How long a statement waits for another process's lock before SQLITE_BUSY (one tuner's
// write transaction is one row: milliseconds; 30 s only passes when something is stuck).
constexpr int kBusyTimeoutMs = 30000;
// How long opening waits for `<path>.lock` (held exclusively only while a process moves an
// unusable file aside and creates a new one: milliseconds).
constexpr double kLockWaitS = 30;
// How long a process that found the file unusable waits for the other collage processes
// using it to close it before it gives up (they found it usable, or are replacing it).
constexpr double kMoveAsideWaitS = 10;

// A failed SQLite call, with its result code: the open path decides by the code whether the
// file is unusable (not a database, corrupt), busy, or the call failed for another reason.
struct SqliteFailure : std::runtime_error {
  int code;
  SqliteFailure(int rc, const std::string& message) : std::runtime_error(message), code(rc) {}
};

bool is_unusable(int code) {
  const int primary = code & 0xff;
  return primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT;
}
bool is_busy(int code) {
  const int primary = code & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& what) {
  throw SqliteFailure(rc, fmt::format("{} ({})", sqlite3_errmsg(db), what));
}

// Finalizes a statement on every exit path.
struct Statement {
  sqlite3* db;
  sqlite3_stmt* stmt = nullptr;
  Statement(sqlite3* d, const char* sql) : db(d) {
    int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
    if (rc != SQLITE_OK) throw_sqlite(db, rc, sql);
  }
  ~Statement() { sqlite3_finalize(stmt); }
  void bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt, i, s.c_str(), -1, SQLITE_TRANSIENT);
  }
  void bind(int i, double d) { sqlite3_bind_double(stmt, i, d); }
  void bind(int i, int64_t v) { sqlite3_bind_int64(stmt, i, v); }
  // SQLITE_ROW or SQLITE_DONE; anything else throws.
  int step() {
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) throw_sqlite(db, rc, sqlite3_sql(stmt));
    return rc;
  }
  std::string text(int column) {
    const unsigned char* t = sqlite3_column_text(stmt, column);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
};

void exec_or_throw(sqlite3* db, const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string message = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw SqliteFailure(rc, fmt::format("{} ({})", message, sql));
  }
}

// The processes (other than this one) holding a lock on any of `paths`, from /proc/locks:
// "pid 1234 (collage)", or "" when none is found. For error messages that name the holder.
std::string lock_holders(const std::vector<std::string>& paths) {
  struct FileId {
    unsigned major, minor;
    unsigned long inode;
  };
  std::vector<FileId> files;
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0)
      files.push_back({::major(st.st_dev), ::minor(st.st_dev), st.st_ino});
  }
  std::ifstream locks("/proc/locks");
  std::set<long> pids;
  for (std::string line; std::getline(locks, line);) {
    // "1: POSIX  ADVISORY  WRITE 2351 08:01:123456 0 EOF" (waiters have "->" after the id).
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string w; in >> w;)
      if (w != "->") f.push_back(w);
    if (f.size() < 6) continue;
    unsigned major = 0, minor = 0;
    unsigned long inode = 0;
    if (std::sscanf(f[5].c_str(), "%x:%x:%lu", &major, &minor, &inode) != 3) continue;
    for (const FileId& id : files)
      if (id.major == major && id.minor == minor && id.inode == inode)
        pids.insert(std::atol(f[4].c_str()));
  }
  pids.erase(::getpid());
  std::string text;
  for (long pid : pids) {
    std::ifstream comm(fmt::format("/proc/{}/comm", pid));
    std::string name;
    std::getline(comm, name);
    text += fmt::format("{}pid {}{}", text.empty() ? "" : ", ", pid,
                        name.empty() ? "" : " (" + name + ")");
  }
  return text;
}

// flock(fd, op | LOCK_NB) retried until it succeeds or `seconds` pass.
bool flock_within(int fd, int op, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    if (::flock(fd, op | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// What a file holds, read in one transaction.
enum class Found { kEmpty, kCurrent, kOlder, kForeign, kNewer, kCorrupt };

struct Inspection {
  Found found = Found::kEmpty;
  int version = 0;
  std::string why;  // for kForeign, kNewer, kCorrupt
};

// The columns of the `costs` table at each schema version (a table with other columns is not
// ours, whatever user_version says: user_version is any application's to set).
std::set<std::string> costs_columns(int version) {
  std::set<std::string> c = {"key", "backend", "hardware", "subgraph", "cost_ms", "ok", "reason"};
  if (version >= 2) c.insert("spent_s");
  return c;
}

// Reads the schema; the caller holds a transaction, so every statement sees one state.
Inspection inspect(sqlite3* db) {
  Inspection r;
  {
    Statement s(db, "PRAGMA user_version");  // SQLITE_NOTADB on a file that is no database
    if (s.step() == SQLITE_ROW) r.version = sqlite3_column_int(s.stmt, 0);
  }
  {
    Statement s(db, "PRAGMA quick_check");
    std::string first;
    if (s.step() == SQLITE_ROW) first = s.text(0);
    if (first != "ok") {
      r.found = Found::kCorrupt;
      r.why = "integrity check failed: " + first;
      return r;
    }
  }
  int tables = 0;
  {
    Statement s(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'");
    if (s.step() == SQLITE_ROW) tables = sqlite3_column_int(s.stmt, 0);
  }
  if (r.version == 0) {
    r.found = tables == 0 ? Found::kEmpty : Found::kForeign;
    if (tables) r.why = "it holds tables but no collage schema version";
    return r;
  }
  if (r.version > CostDb::kSchemaVersion) {
    r.found = Found::kNewer;
    r.why =
        fmt::format("schema {} is newer than this collage's {}", r.version, CostDb::kSchemaVersion);
    return r;
  }
  std::set<std::string> columns;
  {
    Statement s(db, "PRAGMA table_info(costs)");
    while (s.step() == SQLITE_ROW) columns.insert(s.text(1));
  }
  for (const std::string& c : costs_columns(r.version))
    if (!columns.count(c)) {
      r.found = Found::kForeign;
      r.why = fmt::format("schema version {} but its costs table has no column '{}'", r.version, c);
      return r;
    }
  r.found = r.version == CostDb::kSchemaVersion ? Found::kCurrent : Found::kOlder;
  return r;
}

void create_schema(sqlite3* db) {
  exec_or_throw(db,
                "CREATE TABLE costs ("
                " key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
                " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
                " measured_at TEXT DEFAULT CURRENT_TIMESTAMP, spent_s REAL DEFAULT 0)");
  exec_or_throw(db, fmt::format("PRAGMA user_version = {}", CostDb::kSchemaVersion).c_str());
}

// One step up from `version`, inside the caller's write transaction.
void migrate_from(sqlite3* db, int version) {
  if (version == 1) {
    // Version 1 had no spent_s: its rows read 0 (unknown), nothing is re-measured.
    exec_or_throw(db, "ALTER TABLE costs ADD COLUMN spent_s REAL DEFAULT 0");
    exec_or_throw(db, "PRAGMA user_version = 2");
  }
}

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
  const std::string lock_path = path + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd_ < 0)
    fail(ErrorKind::kIo, "cannot open the cost database's lock file {}: {}", lock_path,
         std::strerror(errno));
  // Shared while we use the file; exclusive only to move it aside (below).
  if (!flock_within(lock_fd_, LOCK_SH, kLockWaitS))
    fail(ErrorKind::kIo, "cost database {}: {} stays locked by {} for more than {:g} s", path,
         lock_path, lock_holders({lock_path}), kLockWaitS);
  std::string why;
  if (open_usable(why)) return;
  close_connection();
  // Unusable. Every collage process using the file holds the lock shared, so holding it
  // exclusively proves nobody uses the file. Until then, either the others are replacing it
  // too (one of them will: check again) or they use it, and it stays.
  ::flock(lock_fd_, LOCK_UN);
  auto deadline = Clock::now() + std::chrono::duration<double>(kMoveAsideWaitS);
  while (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (::flock(lock_fd_, LOCK_SH | LOCK_NB) == 0) {
      std::string again;
      if (open_usable(again)) return;  // another process replaced it meanwhile
      close_connection();
      ::flock(lock_fd_, LOCK_UN);
    }
    if (Clock::now() > deadline)
      fail(ErrorKind::kIo,
           "cost database {} is unusable ({}) but open in other collage processes ({}); not "
           "moving it aside while they use it",
           path, why, lock_holders({lock_path}));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Exclusive: the file may have been replaced between our check and now.
  if (!open_usable(why)) {
    close_connection();
    move_aside(why);
    if (!open_usable(why))
      fail(ErrorKind::kIo, "cannot create a cost database at {}: {}", path, why);
  }
  // Back to shared. Not atomic, and needs not be: whoever gets it exclusive checks again.
  ::flock(lock_fd_, LOCK_SH);
}

CostDb::~CostDb() {
  close_connection();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void CostDb::close_connection() {
  if (db_) sqlite3_close(db_);
  db_ = nullptr;
}

bool CostDb::open_usable(std::string& why) {
  int rc =
      sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    close_connection();
    fail(ErrorKind::kIo, "cannot open cost database {}: {}", path_, message);
  }
  // Two tuners on one file wait for each other instead of failing with SQLITE_BUSY.
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  try {
    // Read everything in one transaction: a creator committing between two reads (version
    // 0, then its new table) looked like someone else's database.
    exec_or_throw(db_, "BEGIN");
    Inspection found = inspect(db_);
    exec_or_throw(db_, "COMMIT");
    if (found.found == Found::kEmpty || found.found == Found::kOlder) {
      // BEGIN IMMEDIATE takes the write lock first (waiting for it), so the check inside is
      // the state we change: another process may have created or migrated it meanwhile.
      exec_or_throw(db_, "BEGIN IMMEDIATE");
      found = inspect(db_);
      if (found.found == Found::kEmpty) create_schema(db_);
      for (int v = found.version; found.found == Found::kOlder && v < kSchemaVersion; ++v)
        migrate_from(db_, v);
      exec_or_throw(db_, "COMMIT");
    }
    if (found.found != Found::kEmpty && found.found != Found::kOlder &&
        found.found != Found::kCurrent) {
      why = found.why;
      return false;
    }
    // WAL lets readers and one writer work at once; the mode is stored in the file, so only
    // its first opener changes it (which needs every other connection to wait a moment).
    std::string mode;
    {
      Statement s(db_, "PRAGMA journal_mode");
      if (s.step() == SQLITE_ROW) mode = s.text(0);
    }
    if (mode != "wal") exec_or_throw(db_, "PRAGMA journal_mode=WAL");
    exec_or_throw(db_, "PRAGMA synchronous=NORMAL");
    return true;
  } catch (const SqliteFailure& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);  // if a transaction is open
    if (is_unusable(e.code)) {
      why = e.what();
      return false;
    }
    if (is_busy(e.code)) {
      std::string holders = lock_holders({path_, path_ + "-wal", path_ + "-shm"});
      fail(ErrorKind::kIo, "cost database {} stayed locked for {} s{}: {}", path_,
           kBusyTimeoutMs / 1000, holders.empty() ? "" : " by " + holders, e.what());
    }
    fail(ErrorKind::kIo, "cost database {}: {}", path_, e.what());
  }
}

void CostDb::move_aside(const std::string& why) {
  auto stamp = std::chrono::system_clock::now().time_since_epoch().count();
  moved_aside_to_ = path_ + ".unusable-" + std::to_string(stamp);
  std::error_code ec;
  fs::rename(path_, moved_aside_to_, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    fail(ErrorKind::kIo, "cost database {} is unusable ({}) and cannot be moved aside: {}", path_,
         why, ec.message());
  // Its journal belongs to it (kept for inspection); the shared-memory index is rebuilt.
  for (const char* suffix : {"-wal", "-journal"})
    if (fs::exists(path_ + suffix, ec)) fs::rename(path_ + suffix, moved_aside_to_ + suffix, ec);
  fs::remove(path_ + "-shm", ec);
  spdlog::warn("cost database {} was unusable ({}); moved it to {} and started a new one", path_,
               why, moved_aside_to_);
}

std::optional<CostRecord> CostDb::find(const std::string& key) const {
  try {
    Statement s(db_, "SELECT cost_ms, ok, reason, spent_s FROM costs WHERE key = ?");
    s.bind(1, key);
    if (s.step() != SQLITE_ROW) return std::nullopt;
    CostRecord r;
    r.ok = sqlite3_column_int(s.stmt, 1) != 0;
    r.milliseconds =
        r.ok ? sqlite3_column_double(s.stmt, 0) : std::numeric_limits<double>::infinity();
    r.reason = s.text(2);
    r.spent_s = sqlite3_column_double(s.stmt, 3);
    return r;
  } catch (const SqliteFailure& e) {
    fail(ErrorKind::kIo, "cost database {}: {}", path_, e.what());
  }
}

CostRecord CostDb::put(const std::string& key, const std::string& backend,
                       const std::string& hardware, const std::string& subgraph_text,
                       const CostRecord& record) {
  try {
    // One statement: SQLite runs it as its own write transaction, waiting (busy timeout)
    // for another writer, and never overwrites what another process stored first.
    Statement s(db_,
                "INSERT INTO costs"
                " (key, backend, hardware, subgraph, cost_ms, ok, reason, spent_s)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING");
    s.bind(1, key);
    s.bind(2, backend);
    s.bind(3, hardware);
    s.bind(4, subgraph_text);
    s.bind(5, std::isfinite(record.milliseconds) ? record.milliseconds : -1.0);
    s.bind(6, static_cast<int64_t>(record.ok ? 1 : 0));
    s.bind(7, record.reason);
    s.bind(8, record.spent_s);
    s.step();
    if (sqlite3_changes(db_) == 1) return record;
  } catch (const SqliteFailure& e) {
    fail(ErrorKind::kIo, "cost database {}: {}", path_, e.what());
  }
  std::optional<CostRecord> first = find(key);
  return first ? *first : record;
}

int64_t CostDb::size() const {
  try {
    Statement s(db_, "SELECT count(*) FROM costs");
    return s.step() == SQLITE_ROW ? sqlite3_column_int64(s.stmt, 0) : 0;
  } catch (const SqliteFailure& e) {
    fail(ErrorKind::kIo, "cost database {}: {}", path_, e.what());
  }
}

int64_t CostDb::size(const std::string& backend) const {
  try {
    Statement s(db_, "SELECT count(*) FROM costs WHERE backend = ?");
    s.bind(1, backend);
    return s.step() == SQLITE_ROW ? sqlite3_column_int64(s.stmt, 0) : 0;
  } catch (const SqliteFailure& e) {
    fail(ErrorKind::kIo, "cost database {}: {}", path_, e.what());
  }
}

}  // namespace collage
