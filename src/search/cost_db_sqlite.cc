// The SQLite engine of the cost database: one file shared by the processes of one machine.
// Opening is careful because several may open it at the same moment (issue 21; see
// docs/DESIGN.md, "Cost database"): the schema is inspected in one read transaction and
// created or migrated in one write transaction that checks again; only what SQLite reports
// as not a database or corrupt, or a schema that is not collage's, makes the file unusable,
// and such a file is moved aside (kept for inspection) under an exclusive lock on
// `<path>.lock`, which every collage process holds shared while it has the database open:
// a file another collage process uses is never moved. A database that stays locked is an
// error naming the process holding it.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "collage/error.h"
#include "search/cost_db_engines.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How long a statement waits for another process's lock before SQLITE_BUSY (a write
// transaction here is a row or two: milliseconds; 30 s only passes when something is stuck).
// COLLAGE_COST_DB_BUSY_TIMEOUT (seconds) changes it.
int busy_timeout_ms() {
  static const int ms = [] {
    const char* env = std::getenv("COLLAGE_COST_DB_BUSY_TIMEOUT");
    double s = env && *env ? std::atof(env) : 30;
    return static_cast<int>(std::max(0.0, s) * 1000);
  }();
  return ms;
}
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
  Statement& bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt, i, s.c_str(), -1, SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind_blob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, double d) {
    sqlite3_bind_double(stmt, i, d);
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt, i, v);
    return *this;
  }
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
  std::string blob(int column) {
    const void* b = sqlite3_column_blob(stmt, column);
    return b ? std::string(static_cast<const char*>(b), sqlite3_column_bytes(stmt, column)) : "";
  }
  double real(int column) { return sqlite3_column_double(stmt, column); }
  int64_t integer(int column) { return sqlite3_column_int64(stmt, column); }
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

std::set<std::string> columns_of(sqlite3* db, const std::string& table) {
  std::set<std::string> columns;
  Statement s(db, ("PRAGMA table_info(" + table + ")").c_str());
  while (s.step() == SQLITE_ROW) columns.insert(s.text(1));
  return columns;
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
  std::set<std::string> columns = columns_of(db, "costs");
  for (const std::string& c : costs_columns(r.version))
    if (!columns.count(c)) {
      r.found = Found::kForeign;
      r.why = fmt::format("schema version {} but its costs table has no column '{}'", r.version, c);
      return r;
    }
  if (r.version >= 3) {
    std::set<std::string> jobs = columns_of(db, "jobs");
    for (const std::string& c : jobs_columns())
      if (!jobs.count(c)) {
        r.found = Found::kForeign;
        r.why =
            fmt::format("schema version {} but its jobs table has no column '{}'", r.version, c);
        return r;
      }
  }
  r.found = r.version == CostDb::kSchemaVersion ? Found::kCurrent : Found::kOlder;
  return r;
}

constexpr const char* kCreateJobs =
    "CREATE TABLE jobs ("
    " key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
    " subgraph TEXT NOT NULL, machine TEXT NOT NULL, threads INTEGER NOT NULL,"
    " backend_version TEXT NOT NULL, request BLOB, owner TEXT,"
    " ready_at REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, published_at REAL NOT NULL);"
    "CREATE INDEX jobs_queue ON jobs (machine, published_at, key);"
    "CREATE INDEX jobs_by_owner ON jobs (owner)";

void create_schema(sqlite3* db) {
  exec_or_throw(db,
                "CREATE TABLE costs ("
                " key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
                " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
                " measured_at TEXT DEFAULT CURRENT_TIMESTAMP, spent_s REAL DEFAULT 0,"
                " measured_by TEXT DEFAULT '')");
  exec_or_throw(db, kCreateJobs);
  exec_or_throw(db, fmt::format("PRAGMA user_version = {}", CostDb::kSchemaVersion).c_str());
}

// One step up from `version`, inside the caller's write transaction.
void migrate_from(sqlite3* db, int version, const std::string& path) {
  if (version == 1) {
    // Version 1 had no spent_s: its rows read 0 (unknown), nothing is re-measured.
    exec_or_throw(db, "ALTER TABLE costs ADD COLUMN spent_s REAL DEFAULT 0");
    exec_or_throw(db, "PRAGMA user_version = 2");
  }
  if (version == 2) {
    exec_or_throw(db, "ALTER TABLE costs ADD COLUMN measured_by TEXT DEFAULT ''");
    exec_or_throw(db, kCreateJobs);
    // New digests: every record whose old key is what schema 2 made of its text and
    // fingerprint gets its new key; whole-plan latencies embed the old model hash and are
    // dropped (re-timed by the next tune); anything else stays as it was (never found).
    struct Row {
      std::string key, kind, text, hardware;
    };
    std::vector<Row> rows;
    {
      Statement s(db, "SELECT key, backend, subgraph, hardware FROM costs");
      while (s.step() == SQLITE_ROW) rows.push_back({s.text(0), s.text(1), s.text(2), s.text(3)});
    }
    int64_t rekeyed = 0, dropped = 0, kept = 0;
    Statement drop(db, "DELETE FROM costs WHERE key = ?");
    Statement update(db, "UPDATE OR IGNORE costs SET key = ? WHERE key = ?");
    for (const Row& r : rows) {
      if (embeds_model_hash(r.kind)) {
        drop.bind(1, r.key).step();
        sqlite3_reset(drop.stmt);
        ++dropped;
        continue;
      }
      std::string key = rekey_for_v3(r.key, r.text, r.hardware);
      if (key.empty()) {
        ++kept;
        continue;
      }
      update.bind(1, key).bind(2, r.key).step();
      sqlite3_reset(update.stmt);
      ++rekeyed;
    }
    exec_or_throw(db, "PRAGMA user_version = 3");
    if (!rows.empty())
      spdlog::warn(
          "cost database {} migrated to schema 3: {} records re-keyed, {} whole-plan latencies "
          "dropped (their keys hold the model hash, which changed), {} records of unknown key "
          "form kept as they were",
          path, rekeyed, dropped, kept);
  }
}

// A JSON array of strings: how a list travels into SQL (json_each).
std::string json_list(const std::vector<std::string>& items) {
  return nlohmann::json(items).dump();
}

CostRecord record_from(Statement& s, int first) {
  CostRecord r;
  r.ok = sqlite3_column_int(s.stmt, first + 1) != 0;
  r.milliseconds = r.ok ? s.real(first) : std::numeric_limits<double>::infinity();
  r.reason = s.text(first + 2);
  r.spent_s = s.real(first + 3);
  r.measured_by = s.text(first + 4);
  return r;
}
constexpr const char* kRecordColumns = "cost_ms, ok, reason, spent_s, measured_by";

class SqliteCostDb : public CostDbEngine {
 public:
  SqliteCostDb(const std::string& path, CostDb::Open mode);
  ~SqliteCostDb() override;

  std::optional<CostRecord> find(const std::string& key) override;
  std::vector<std::pair<std::string, CostRecord>> find_many(
      const std::vector<std::string>& keys) override;
  CostRecord put(const StoredRecord& row) override;
  int64_t count(const std::string* backend) override;
  Claim claim(const MeasureJob& job, const std::string& owner, double lease_s) override;
  std::optional<MeasureJob> claim_next(const JobFilter& filter, const std::string& owner,
                                       double lease_s) override;
  void publish(const std::vector<MeasureJob>& jobs) override;
  void release(const std::string& key, const std::string& owner) override;
  int64_t renew(const std::string& owner, double lease_s) override;
  JobCounts job_counts(const std::vector<std::string>& keys) override;
  void scan(const std::function<void(const StoredRecord&)>& visit) override;
  int64_t import(const std::vector<StoredRecord>& rows) override;
  std::string engine() const override { return "sqlite"; }
  int schema_version() override { return CostDb::kSchemaVersion; }
  std::string moved_aside_to() const override { return moved_aside_to_; }

 private:
  // Opens the connection and makes the schema current. False (with the reason) when the
  // file is not a usable collage database; throws Error for anything else (busy, I/O).
  bool open_usable(std::string& why);
  // CostDb::Open::kExisting: a current file, read as it is, or an error.
  void open_existing();
  void close_connection();
  // Switches the file to WAL unless it is already (see the definition).
  void use_wal();
  void move_aside(const std::string& why);
  // Runs `body` in a transaction (BEGIN IMMEDIATE when `write`: the write lock first, so
  // what the body reads is what it changes), turning SQLite failures into Error(kIo).
  template <typename F>
  auto transaction(bool write, F&& body) -> decltype(body());
  [[noreturn]] void fail_io(const SqliteFailure& e) const;
  std::optional<CostRecord> find_locked(const std::string& key);
  void insert_record(const StoredRecord& row, bool& inserted);

  std::string path_;
  std::string moved_aside_to_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;  // <path>.lock, flock()ed shared while open
};

SqliteCostDb::SqliteCostDb(const std::string& path, CostDb::Open mode) : path_(path) {
  std::error_code ec;
  if (mode == CostDb::Open::kExisting && !fs::is_regular_file(path, ec))
    fail(ErrorKind::kInvalidArgument, "no cost database at {}", path);
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
  if (mode == CostDb::Open::kExisting) {
    open_existing();
    return;
  }
  std::string why;
  if (open_usable(why)) return;
  close_connection();
  if (mode == CostDb::Open::kWrite)
    fail(ErrorKind::kInvalidArgument, "cost database {} is not usable ({}); leaving it as it is",
         path, why);
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

SqliteCostDb::~SqliteCostDb() {
  close_connection();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void SqliteCostDb::close_connection() {
  if (db_) sqlite3_close(db_);
  db_ = nullptr;
}

bool SqliteCostDb::open_usable(std::string& why) {
  int rc =
      sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    close_connection();
    fail(ErrorKind::kIo, "cannot open cost database {}: {}", path_, message);
  }
  // Two tuners on one file wait for each other instead of failing with SQLITE_BUSY.
  sqlite3_busy_timeout(db_, busy_timeout_ms());
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
      for (int v = found.version; found.found == Found::kOlder && v < CostDb::kSchemaVersion; ++v)
        migrate_from(db_, v, path_);
      exec_or_throw(db_, "COMMIT");
    }
    if (found.found != Found::kEmpty && found.found != Found::kOlder &&
        found.found != Found::kCurrent) {
      why = found.why;
      return false;
    }
    use_wal();
    exec_or_throw(db_, "PRAGMA synchronous=NORMAL");
    return true;
  } catch (const SqliteFailure& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);  // if a transaction is open
    if (is_unusable(e.code)) {
      why = e.what();
      return false;
    }
    fail_io(e);
  }
}

// WAL lets readers and one writer work at once. The mode is stored in the file, so only its
// first opener changes it, and that needs no other connection reading: SQLite answers
// SQLITE_BUSY at once there, without its busy handler (8 processes opening one new file
// failed so in 1 round of ~20). Retried until the busy timeout, or until another opener
// has switched the file meanwhile.
void SqliteCostDb::use_wal() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(busy_timeout_ms());
  for (;;) {
    std::string mode;
    {
      Statement s(db_, "PRAGMA journal_mode");
      if (s.step() == SQLITE_ROW) mode = s.text(0);
    }
    if (mode == "wal") return;
    try {
      exec_or_throw(db_, "PRAGMA journal_mode=WAL");
      return;
    } catch (const SqliteFailure& e) {
      if (!is_busy(e.code) || Clock::now() > deadline) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void SqliteCostDb::open_existing() {
  if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : "cannot open";
    close_connection();
    fail(ErrorKind::kIo, "cannot open cost database {}: {}", path_, message);
  }
  sqlite3_busy_timeout(db_, busy_timeout_ms());
  Inspection found;
  try {
    exec_or_throw(db_, "BEGIN");
    found = inspect(db_);
    exec_or_throw(db_, "COMMIT");
  } catch (const SqliteFailure& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    if (is_unusable(e.code)) refuse_other_version(path_, std::string("not usable: ") + e.what());
    fail_io(e);
  }
  if (found.found == Found::kCurrent) return;
  refuse_other_version(path_, found.found == Found::kEmpty ? std::string("it is empty")
                              : found.found == Found::kOlder
                                  ? fmt::format("its records are of schema {}", found.version)
                                  : found.why);
}

void SqliteCostDb::fail_io(const SqliteFailure& e) const {
  if (is_busy(e.code)) {
    std::string holders = lock_holders({path_, path_ + "-wal", path_ + "-shm"});
    fail(ErrorKind::kIo,
         "cost database {} stayed locked for {:g} s{} (COLLAGE_COST_DB_BUSY_TIMEOUT sets how "
         "long to wait); nothing was changed: {}",
         path_, busy_timeout_ms() / 1000.0, holders.empty() ? "" : " by " + holders, e.what());
  }
  fail(ErrorKind::kIo, "cost database {}: {}", path_, e.what());
}

void SqliteCostDb::move_aside(const std::string& why) {
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

template <typename F>
auto SqliteCostDb::transaction(bool write, F&& body) -> decltype(body()) {
  try {
    exec_or_throw(db_, write ? "BEGIN IMMEDIATE" : "BEGIN");
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      exec_or_throw(db_, "COMMIT");
    } else {
      auto result = body();
      exec_or_throw(db_, "COMMIT");
      return result;
    }
  } catch (const SqliteFailure& e) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    fail_io(e);
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::optional<CostRecord> SqliteCostDb::find_locked(const std::string& key) {
  Statement s(db_, fmt::format("SELECT {} FROM costs WHERE key = ?", kRecordColumns).c_str());
  s.bind(1, key);
  if (s.step() != SQLITE_ROW) return std::nullopt;
  return record_from(s, 0);
}

std::optional<CostRecord> SqliteCostDb::find(const std::string& key) {
  try {
    return find_locked(key);  // one statement: its own read transaction
  } catch (const SqliteFailure& e) {
    fail_io(e);
  }
}

std::vector<std::pair<std::string, CostRecord>> SqliteCostDb::find_many(
    const std::vector<std::string>& keys) {
  return transaction(false, [&] {
    std::vector<std::pair<std::string, CostRecord>> found;
    Statement s(db_, fmt::format("SELECT key, {} FROM costs WHERE key IN"
                                 " (SELECT value FROM json_each(?))",
                                 kRecordColumns)
                         .c_str());
    s.bind(1, json_list(keys));
    while (s.step() == SQLITE_ROW) found.emplace_back(s.text(0), record_from(s, 1));
    return found;
  });
}

void SqliteCostDb::insert_record(const StoredRecord& row, bool& inserted) {
  Statement s(db_,
              "INSERT INTO costs"
              " (key, backend, hardware, subgraph, cost_ms, ok, reason, spent_s, measured_by)"
              " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING");
  const CostRecord& r = row.record;
  s.bind(1, row.key).bind(2, row.backend).bind(3, row.hardware).bind(4, row.subgraph);
  s.bind(5, std::isfinite(r.milliseconds) ? r.milliseconds : -1.0);
  s.bind(6, static_cast<int64_t>(r.ok ? 1 : 0)).bind(7, r.reason).bind(8, r.spent_s);
  s.bind(9, r.measured_by);
  s.step();
  inserted = sqlite3_changes(db_) == 1;
}

CostRecord SqliteCostDb::put(const StoredRecord& row) {
  return transaction(true, [&] {
    bool inserted = false;
    insert_record(row, inserted);
    Statement done(db_, "DELETE FROM jobs WHERE key = ?");
    done.bind(1, row.key).step();
    if (inserted) return row.record;
    std::optional<CostRecord> first = find_locked(row.key);
    return first ? *first : row.record;
  });
}

int64_t SqliteCostDb::count(const std::string* backend) {
  try {
    Statement s(db_, backend ? "SELECT count(*) FROM costs WHERE backend = ?"
                             : "SELECT count(*) FROM costs");
    if (backend) s.bind(1, *backend);
    return s.step() == SQLITE_ROW ? s.integer(0) : 0;
  } catch (const SqliteFailure& e) {
    fail_io(e);
  }
}

Claim SqliteCostDb::claim(const MeasureJob& job, const std::string& owner, double lease_s) {
  return transaction(true, [&] {
    Claim c;
    if (std::optional<CostRecord> r = find_locked(job.row.key)) {
      c.result = Claim::Result::kMeasured;
      c.record = *r;
      return c;
    }
    const double now = unix_now_s();
    // Ours when new, claimable (never held, released, lease expired) or already ours.
    Statement s(db_,
                "INSERT INTO jobs (key, backend, hardware, subgraph, machine, threads,"
                " backend_version, request, owner, ready_at, attempts, published_at)"
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 1, ?11)"
                " ON CONFLICT (key) DO UPDATE SET owner = excluded.owner,"
                " ready_at = excluded.ready_at, attempts = jobs.attempts + 1"
                " WHERE jobs.ready_at <= ?11 OR jobs.owner = excluded.owner");
    s.bind(1, job.row.key).bind(2, job.row.backend).bind(3, job.row.hardware);
    s.bind(4, job.row.subgraph).bind(5, job.machine).bind(6, static_cast<int64_t>(job.threads));
    s.bind(7, job.backend_version).bind_blob(8, job.request).bind(9, owner);
    s.bind(10, now + lease_s).bind(11, now);
    s.step();
    c.result = sqlite3_changes(db_) == 1 ? Claim::Result::kMine : Claim::Result::kHeldElsewhere;
    return c;
  });
}

std::optional<MeasureJob> SqliteCostDb::claim_next(const JobFilter& filter,
                                                   const std::string& owner, double lease_s) {
  return transaction(true, [&]() -> std::optional<MeasureJob> {
    const double now = unix_now_s();
    // Workers (no key list) take only jobs that carry a request: a job claimed by a tuner
    // for itself has none and is measured by a tuner that knows its candidate.
    Statement s(db_,
                "SELECT key, backend, hardware, subgraph, machine, threads, backend_version,"
                " request FROM jobs WHERE machine = ?1 AND threads <= ?2 AND ready_at <= ?3"
                " AND backend_version IN (SELECT value FROM json_each(?4))"
                " AND (?5 = '[]' AND length(request) > 0"
                "      OR key IN (SELECT value FROM json_each(?5)))"
                " ORDER BY published_at, key");
    s.bind(1, filter.machine).bind(2, static_cast<int64_t>(filter.max_threads));
    s.bind(3, now - filter.claimable_for_s).bind(4, json_list(filter.backend_versions));
    s.bind(5, json_list(filter.keys));
    std::optional<MeasureJob> next;
    std::vector<std::string> stale;  // jobs of keys measured meanwhile: done
    while (!next && s.step() == SQLITE_ROW) {
      MeasureJob j;
      j.row.key = s.text(0);
      j.row.backend = s.text(1);
      j.row.hardware = s.text(2);
      j.row.subgraph = s.text(3);
      j.machine = s.text(4);
      j.threads = static_cast<int>(s.integer(5));
      j.backend_version = s.text(6);
      j.request = s.blob(7);
      if (find_locked(j.row.key))
        stale.push_back(j.row.key);
      else
        next = std::move(j);
    }
    sqlite3_reset(s.stmt);
    Statement done(db_, "DELETE FROM jobs WHERE key = ?");
    for (const std::string& key : stale) {
      done.bind(1, key).step();
      sqlite3_reset(done.stmt);
    }
    if (!next) return next;
    Statement take(db_,
                   "UPDATE jobs SET owner = ?, ready_at = ?, attempts = attempts + 1"
                   " WHERE key = ?");
    take.bind(1, owner).bind(2, now + lease_s).bind(3, next->row.key).step();
    return next;
  });
}

void SqliteCostDb::publish(const std::vector<MeasureJob>& jobs) {
  transaction(true, [&] {
    const double now = unix_now_s();
    // A key claimed by a tuner for itself gets the request, so workers can take it over.
    Statement s(db_,
                "INSERT INTO jobs (key, backend, hardware, subgraph, machine, threads,"
                " backend_version, request, owner, ready_at, attempts, published_at)"
                " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, ?9, 0, ?9"
                " WHERE NOT EXISTS (SELECT 1 FROM costs WHERE key = ?1)"
                " ON CONFLICT (key) DO UPDATE SET request = excluded.request"
                " WHERE length(jobs.request) IS NOT length(excluded.request)");
    for (const MeasureJob& j : jobs) {
      s.bind(1, j.row.key).bind(2, j.row.backend).bind(3, j.row.hardware);
      s.bind(4, j.row.subgraph).bind(5, j.machine).bind(6, static_cast<int64_t>(j.threads));
      s.bind(7, j.backend_version).bind_blob(8, j.request).bind(9, now);
      s.step();
      sqlite3_reset(s.stmt);
    }
  });
}

void SqliteCostDb::release(const std::string& key, const std::string& owner) {
  transaction(true, [&] {
    Statement s(db_, "UPDATE jobs SET owner = NULL, ready_at = ? WHERE key = ? AND owner = ?");
    s.bind(1, unix_now_s()).bind(2, key).bind(3, owner).step();
  });
}

int64_t SqliteCostDb::renew(const std::string& owner, double lease_s) {
  return transaction(true, [&] {
    Statement s(db_, "UPDATE jobs SET ready_at = ? WHERE owner = ?");
    s.bind(1, unix_now_s() + lease_s).bind(2, owner).step();
    return static_cast<int64_t>(sqlite3_changes(db_));
  });
}

JobCounts SqliteCostDb::job_counts(const std::vector<std::string>& keys) {
  return transaction(false, [&] {
    Statement s(db_,
                "SELECT count(*) FILTER (WHERE ready_at <= ?1),"
                " count(*) FILTER (WHERE ready_at > ?1) FROM jobs"
                " WHERE ?2 = '[]' OR key IN (SELECT value FROM json_each(?2))");
    s.bind(1, unix_now_s()).bind(2, json_list(keys));
    JobCounts c;
    if (s.step() == SQLITE_ROW) {
      c.queued = s.integer(0);
      c.claimed = s.integer(1);
    }
    return c;
  });
}

void SqliteCostDb::scan(const std::function<void(const StoredRecord&)>& visit) {
  transaction(false, [&] {
    Statement s(db_, fmt::format("SELECT key, backend, hardware, subgraph, {} FROM costs"
                                 " ORDER BY key",
                                 kRecordColumns)
                         .c_str());
    while (s.step() == SQLITE_ROW) {
      StoredRecord row{s.text(0), s.text(1), s.text(2), s.text(3), record_from(s, 4)};
      visit(row);
    }
  });
}

int64_t SqliteCostDb::import(const std::vector<StoredRecord>& rows) {
  return transaction(true, [&] {
    int64_t added = 0;
    for (const StoredRecord& row : rows) {
      bool inserted = false;
      insert_record(row, inserted);
      added += inserted;
    }
    return added;
  });
}

}  // namespace

std::unique_ptr<CostDbEngine> open_sqlite_cost_db(const std::string& path, CostDb::Open mode) {
  return std::make_unique<SqliteCostDb>(path, mode);
}

}  // namespace collage
