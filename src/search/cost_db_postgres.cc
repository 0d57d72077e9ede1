// The PostgreSQL engine of the cost database (libpq), for a team's or a fleet's shared
// measurements and the distributed job queue. The same schema version, tables and rules as
// the SQLite engine (cost_db_sqlite.cc): the schema is inspected in one transaction and
// created or migrated in one transaction that holds an advisory lock and inspects again
// (another process may have created it first); a foreign or broken schema is refused with a
// message saying what is wrong (a server database is never moved aside or dropped); the
// first record of a key wins. Leases run on the server's clock, so machines with skewed
// clocks agree on when one expires. Built only when libpq is found (COLLAGE_HAVE_POSTGRES).
#include <arpa/inet.h>
#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "collage/error.h"
#include "search/cost_db_engines.h"

namespace collage {
namespace {

// The server's clock in seconds since the epoch (leases, publish times).
constexpr const char* kNow = "extract(epoch from clock_timestamp())::float8";
// Serializes schema creation and migration between processes (pg_advisory_xact_lock).
constexpr int64_t kSchemaLockId = 0x636f6c6c616765;  // "collage"
constexpr const char* kSchemaTable = "collage_schema";

// Failures a transaction is simply retried after (another transaction won a conflict).
bool retryable(const char* sqlstate) {
  return sqlstate && (std::strcmp(sqlstate, "40001") == 0 || std::strcmp(sqlstate, "40P01") == 0);
}

// PostgreSQL's text columns take valid UTF-8 without NUL bytes; a model's string attributes
// (part of a subgraph's text) or an exception message may be neither. The text is only
// informative (the key is a digest), so other bytes become '?'.
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && c != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

std::string json_list(const std::vector<std::string>& items) {
  return nlohmann::json(items).dump();
}

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// A statement's parameter: text, binary (bytea) or NULL.
struct Param {
  std::string value;
  bool binary = false;
  bool null = false;
  Param(std::string v) : value(std::move(v)) {}  // NOLINT: implicit on purpose
  Param(const char* v) : value(v) {}             // NOLINT
  Param(double v) : value(fmt::format("{:.17g}", v)) {}
  Param(int64_t v) : value(std::to_string(v)) {}
  Param(int v) : value(std::to_string(v)) {}
  static Param bytes(std::string v) {
    Param p(std::move(v));
    p.binary = true;
    return p;
  }
};

// A failed statement, with its SQLSTATE.
struct PgFailure : std::runtime_error {
  std::string sqlstate;
  PgFailure(const std::string& message, std::string state)
      : std::runtime_error(message), sqlstate(std::move(state)) {}
};

enum class Found { kEmpty, kCurrent, kOlder, kForeign, kNewer, kBroken };
struct Inspection {
  Found found = Found::kEmpty;
  int version = 0;
  std::string why;
};

class PostgresCostDb : public CostDbEngine {
 public:
  PostgresCostDb(const std::string& url, std::string shown, CostDb::Open mode);
  ~PostgresCostDb() override {
    if (conn_) PQfinish(conn_);
  }

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
  std::string engine() const override { return "postgresql"; }
  int schema_version() override { return version_; }

 private:
  // Runs one statement; throws PgFailure on an error.
  // `binary`: results in binary format (raw bytes for text and bytea, network-order
  // integers), for claim_next's request: hex text would double a ~200 KB subgraph.
  Result run(const char* sql, const std::vector<Param>& params = {}, bool binary = false);
  // Runs `body` in a transaction, retried on serialization failures and deadlocks;
  // PgFailure becomes Error(kIo) naming the database.
  template <typename F>
  auto transaction(F&& body) -> decltype(body());
  // Runs `body` (one statement in autocommit) again once the connection is back, if it was
  // lost; PgFailure becomes Error(kIo) naming the database.
  template <typename F>
  auto statement(F&& body) -> decltype(body());
  // The session settings every connection gets (and gets again after a reset).
  void configure_session();
  // Whether the connection was lost (the server restarted, an administrator ended the
  // session, the network dropped it) and is back after PQreset: a tuner or a worker then
  // goes on instead of failing hours into a run. Retried for ~5 s, long enough for a
  // server restart.
  bool reconnected();
  Inspection inspect();
  void create_schema();
  CostRecord record_from(PGresult* r, int row, int first);
  std::optional<CostRecord> find_in(const std::string& key);

  PGconn* conn_ = nullptr;
  std::string shown_;
  std::map<std::string, std::string> prepared_;  // SQL text -> prepared statement name
  int version_ = 0;
};

PostgresCostDb::PostgresCostDb(const std::string& url, std::string shown, CostDb::Open mode)
    : shown_(std::move(shown)) {
  conn_ = PQconnectdb(url.c_str());
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string why = PQerrorMessage(conn_);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    fail(ErrorKind::kIo, "cannot connect to cost database {}: {}", shown_, why);
  }
  // NOTICEs ("relation already exists, skipping") are not the user's business.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  configure_session();
  Inspection found = transaction([&] {
    run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    return inspect();
  });
  if (mode == CostDb::Open::kExisting && found.found != Found::kCurrent)
    refuse_other_version(shown_, found.found == Found::kEmpty
                                     ? std::string("it holds no collage cost database")
                                     : found.why);
  if (found.found == Found::kEmpty || found.found == Found::kOlder) {
    found = transaction([&] {
      // One creator at a time; the inspection inside is the state we change.
      run("SELECT pg_advisory_xact_lock($1)", {kSchemaLockId});
      Inspection again = inspect();
      if (again.found == Found::kEmpty) create_schema();
      // No PostgreSQL database older than schema 3 exists: it came with schema 3. Later
      // versions migrate here, one step each, as the SQLite engine does.
      return again.found == Found::kEmpty ? Inspection{Found::kCurrent, CostDb::kSchemaVersion, ""}
                                          : again;
    });
  }
  if (found.found != Found::kCurrent)
    fail(ErrorKind::kInvalidArgument,
         "cost database {} is not usable: {}; collage never drops or moves a server's tables: "
         "point --cost-db at another database (or schema, with ?options=-csearch_path%3DNAME)",
         shown_, found.why);
  version_ = found.version;
}

void PostgresCostDb::configure_session() {
  // Commits do not wait for the server's disk (docs/DESIGN.md, "Cost database"): a server
  // crash may lose this session's last few hundred milliseconds of claims and records, and
  // what it loses is consistent (a record and its job's deletion are one transaction), so
  // an expired claim is measured again. Waiting for the disk tripled a job's queue overhead
  // here (two commits: 3-4 ms each with fsync).
  PQclear(PQexec(conn_, "SET synchronous_commit = off"));
}

bool PostgresCostDb::reconnected() {
  if (PQstatus(conn_) != CONNECTION_BAD) return false;
  constexpr int kAttempts = 10;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) continue;
    prepared_.clear();  // prepared statements died with the old session
    configure_session();
    spdlog::warn("cost database {}: the connection was lost; reconnected", shown_);
    return true;
  }
  return false;
}

Result PostgresCostDb::run(const char* sql, const std::vector<Param>& params, bool binary) {
  std::vector<const char*> values;
  std::vector<int> lengths, formats;
  for (const Param& p : params) {
    values.push_back(p.null ? nullptr : p.value.c_str());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  Result r;
  if (params.empty()) {
    r.reset(PQexec(conn_, sql));
  } else {
    // Statements with parameters are the per-job ones: prepared once per connection, so
    // the server parses and plans a claim or a store once, not per job.
    auto [it, fresh] = prepared_.emplace(sql, fmt::format("s{}", prepared_.size()));
    if (fresh) {
      Result made(
          PQprepare(conn_, it->second.c_str(), sql, static_cast<int>(params.size()), nullptr));
      if (!made || PQresultStatus(made.get()) != PGRES_COMMAND_OK) {
        std::string message = made ? PQresultErrorMessage(made.get()) : PQerrorMessage(conn_);
        const char* state = made ? PQresultErrorField(made.get(), PG_DIAG_SQLSTATE) : nullptr;
        prepared_.erase(it);
        throw PgFailure(message, state ? state : "");
      }
    }
    r.reset(PQexecPrepared(conn_, it->second.c_str(), static_cast<int>(params.size()),
                           values.data(), lengths.data(), formats.data(), binary ? 1 : 0));
  }
  ExecStatusType status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    const char* state = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
    std::string message = r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' '))
      message.pop_back();
    throw PgFailure(message, state ? state : "");
  }
  return r;
}

template <typename F>
auto PostgresCostDb::transaction(F&& body) -> decltype(body()) {
  for (int attempt = 0;; ++attempt) {
    try {
      run("BEGIN");
      if constexpr (std::is_void_v<decltype(body())>) {
        body();
        run("COMMIT");
        return;
      } else {
        auto result = body();
        run("COMMIT");
        return result;
      }
    } catch (const PgFailure& e) {
      PQclear(PQexec(conn_, "ROLLBACK"));
      if (retryable(e.sqlstate.c_str()) && attempt < 20) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1 + attempt));
        continue;
      }
      // A transaction cut by a lost connection was rolled back by the server: run it again.
      if (attempt < 20 && reconnected()) continue;
      fail(ErrorKind::kIo, "cost database {}: {}", shown_, e.what());
    } catch (...) {
      PQclear(PQexec(conn_, "ROLLBACK"));
      throw;
    }
  }
}

template <typename F>
auto PostgresCostDb::statement(F&& body) -> decltype(body()) {
  // Every statement here may run twice: a lost connection can hide whether it committed.
  // Records and job deletions are idempotent (first record wins); a claim that committed
  // unseen stays claimed until its lease expires, then another process takes it.
  for (int attempt = 0;; ++attempt) {
    try {
      return body();
    } catch (const PgFailure& e) {
      if (attempt < 3 && reconnected()) continue;
      fail(ErrorKind::kIo, "cost database {}: {}", shown_, e.what());
    }
  }
}

Inspection PostgresCostDb::inspect() {
  Inspection r;
  std::set<std::string> tables;
  {
    Result t =
        run("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_name IN ('collage_schema', 'costs', 'jobs')");
    for (int i = 0; i < PQntuples(t.get()); ++i) tables.insert(PQgetvalue(t.get(), i, 0));
  }
  if (tables.empty()) return r;  // other applications' tables may share the database
  if (!tables.count(kSchemaTable)) {
    r.found = Found::kForeign;
    r.why = fmt::format("it has a table named {} but no collage_schema table: not collage's",
                        tables.count("costs") ? "costs" : "jobs");
    return r;
  }
  Result v = run("SELECT version::text FROM collage_schema");
  if (PQntuples(v.get()) != 1) {
    r.found = Found::kBroken;
    r.why = fmt::format("collage_schema holds {} rows instead of one", PQntuples(v.get()));
    return r;
  }
  r.version = std::atoi(PQgetvalue(v.get(), 0, 0));
  if (r.version > CostDb::kSchemaVersion) {
    r.found = Found::kNewer;
    r.why =
        fmt::format("schema {} is newer than this collage's {}", r.version, CostDb::kSchemaVersion);
    return r;
  }
  if (r.version < 3) {
    r.found = Found::kBroken;
    r.why = fmt::format("collage_schema says version {}, which no PostgreSQL cost database had",
                        r.version);
    return r;
  }
  auto columns_of = [&](const char* table) {
    std::set<std::string> columns;
    Result c =
        run("SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = $1",
            {table});
    for (int i = 0; i < PQntuples(c.get()); ++i) columns.insert(PQgetvalue(c.get(), i, 0));
    return columns;
  };
  for (auto [table, wanted] :
       {std::pair{"costs", costs_columns(r.version)}, std::pair{"jobs", jobs_columns()}}) {
    std::set<std::string> have = columns_of(table);
    for (const std::string& c : wanted)
      if (!have.count(c)) {
        r.found = Found::kBroken;
        r.why =
            have.empty()
                ? fmt::format("schema {} but its {} table is missing", r.version, table)
                : fmt::format("schema {} but its {} table has no column '{}'", r.version, table, c);
        return r;
      }
  }
  r.found = r.version == CostDb::kSchemaVersion ? Found::kCurrent : Found::kOlder;
  return r;
}

void PostgresCostDb::create_schema() {
  run("CREATE TABLE costs ("
      " key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
      " subgraph TEXT NOT NULL, cost_ms DOUBLE PRECISION, ok INTEGER NOT NULL, reason TEXT,"
      " measured_at TIMESTAMPTZ DEFAULT now(), spent_s DOUBLE PRECISION DEFAULT 0,"
      " measured_by TEXT DEFAULT '')");
  run("CREATE TABLE jobs ("
      " key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
      " subgraph TEXT NOT NULL, machine TEXT NOT NULL, threads INTEGER NOT NULL,"
      " backend_version TEXT NOT NULL, request BYTEA, owner TEXT,"
      " ready_at DOUBLE PRECISION NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
      " published_at DOUBLE PRECISION NOT NULL)");
  // The queue's order: a claim walks a machine's jobs oldest first and stops at the first
  // claimable one (without it, every claim sorted all queued jobs: 0.7 ms at 1000 queued).
  run("CREATE INDEX jobs_queue ON jobs (machine, published_at, key)");
  run("CREATE INDEX jobs_by_owner ON jobs (owner)");
  run("CREATE TABLE collage_schema (version INTEGER NOT NULL)");
  run("INSERT INTO collage_schema VALUES ($1)", {CostDb::kSchemaVersion});
}

constexpr const char* kRecordColumns = "cost_ms, ok, reason, spent_s, measured_by";

CostRecord PostgresCostDb::record_from(PGresult* r, int row, int first) {
  CostRecord c;
  c.ok = std::atoi(PQgetvalue(r, row, first + 1)) != 0;
  c.milliseconds = c.ok ? std::strtod(PQgetvalue(r, row, first), nullptr)
                        : std::numeric_limits<double>::infinity();
  c.reason = PQgetvalue(r, row, first + 2);
  c.spent_s = std::strtod(PQgetvalue(r, row, first + 3), nullptr);
  c.measured_by = PQgetvalue(r, row, first + 4);
  return c;
}

std::optional<CostRecord> PostgresCostDb::find_in(const std::string& key) {
  Result r = run(fmt::format("SELECT {} FROM costs WHERE key = $1", kRecordColumns).c_str(), {key});
  if (PQntuples(r.get()) == 0) return std::nullopt;
  return record_from(r.get(), 0, 0);
}

std::optional<CostRecord> PostgresCostDb::find(const std::string& key) {
  return statement([&] { return find_in(key); });
}

std::vector<std::pair<std::string, CostRecord>> PostgresCostDb::find_many(
    const std::vector<std::string>& keys) {
  return statement([&] {
    Result r = run(fmt::format("SELECT key, {} FROM costs WHERE key = ANY(ARRAY("
                               "SELECT json_array_elements_text($1::json)))",
                               kRecordColumns)
                       .c_str(),
                   {json_list(keys)});
    std::vector<std::pair<std::string, CostRecord>> found;
    for (int i = 0; i < PQntuples(r.get()); ++i)
      found.emplace_back(PQgetvalue(r.get(), i, 0), record_from(r.get(), i, 1));
    return found;
  });
}

std::vector<Param> record_params(const StoredRecord& row) {
  const CostRecord& r = row.record;
  return {row.key,
          valid_utf8(row.backend),
          valid_utf8(row.hardware),
          valid_utf8(row.subgraph),
          std::isfinite(r.milliseconds) ? r.milliseconds : -1.0,
          r.ok ? 1 : 0,
          valid_utf8(r.reason),
          r.spent_s,
          valid_utf8(r.measured_by)};
}

constexpr const char* kInsertRecord =
    "INSERT INTO costs (key, backend, hardware, subgraph, cost_ms, ok, reason, spent_s,"
    " measured_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (key) DO NOTHING";

CostRecord PostgresCostDb::put(const StoredRecord& row) {
  return statement([&] {
    // One statement (one transaction): the record if the key has none, and the job done.
    Result r = run(fmt::format("WITH added AS ({} RETURNING key), done AS (DELETE FROM jobs"
                               " WHERE key = $1) SELECT count(*) FROM added",
                               kInsertRecord)
                       .c_str(),
                   record_params(row));
    if (std::atoi(PQgetvalue(r.get(), 0, 0)) == 1) return row.record;
    std::optional<CostRecord> first = find_in(row.key);
    return first ? *first : row.record;
  });
}

int64_t PostgresCostDb::count(const std::string* backend) {
  return statement([&] {
    Result r = backend ? run("SELECT count(*) FROM costs WHERE backend = $1", {*backend})
                       : run("SELECT count(*) FROM costs");
    return static_cast<int64_t>(std::atoll(PQgetvalue(r.get(), 0, 0)));
  });
}

Claim PostgresCostDb::claim(const MeasureJob& job, const std::string& owner, double lease_s) {
  return transaction([&] {
    // The job first, the record after: under READ COMMITTED the record query sees every
    // transaction committed before it, so a record stored (and its job deleted) while we
    // inserted our job row is seen, and the claim given back.
    Result mine = run(fmt::format("INSERT INTO jobs (key, backend, hardware, subgraph, machine,"
                                  " threads, backend_version, request, owner, ready_at, attempts,"
                                  " published_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,"
                                  " {0} + $10, 1, {0}) ON CONFLICT (key) DO UPDATE SET"
                                  " owner = excluded.owner, ready_at = excluded.ready_at,"
                                  " attempts = jobs.attempts + 1 WHERE jobs.ready_at <= {0}"
                                  " OR jobs.owner = excluded.owner RETURNING key",
                                  kNow)
                          .c_str(),
                      {job.row.key, valid_utf8(job.row.backend), valid_utf8(job.row.hardware),
                       valid_utf8(job.row.subgraph), valid_utf8(job.machine), job.threads,
                       valid_utf8(job.backend_version), Param::bytes(job.request), owner, lease_s});
    Claim c;
    c.result = PQntuples(mine.get()) == 1 ? Claim::Result::kMine : Claim::Result::kHeldElsewhere;
    if (std::optional<CostRecord> r = find_in(job.row.key)) {
      if (c.result == Claim::Result::kMine) run("DELETE FROM jobs WHERE key = $1", {job.row.key});
      c.result = Claim::Result::kMeasured;
      c.record = *r;
    }
    return c;
  });
}

std::optional<MeasureJob> PostgresCostDb::claim_next(const JobFilter& filter,
                                                     const std::string& owner, double lease_s) {
  return statement([&]() -> std::optional<MeasureJob> {
    // The queue: the oldest claimable job, locked (others skip it, not wait for it) and
    // taken in one statement. Workers (no key list) take only jobs that carry a request.
    Result r = run(
        fmt::format("WITH next AS (SELECT key FROM jobs WHERE machine = $1 AND threads <= $2"
                    " AND ready_at <= {0} - $3"
                    " AND backend_version = ANY(ARRAY(SELECT json_array_elements_text($4::json)))"
                    " AND ($5::text = '[]' AND length(request) > 0"
                    "      OR key = ANY(ARRAY(SELECT json_array_elements_text($5::json))))"
                    " AND NOT EXISTS (SELECT 1 FROM costs c WHERE c.key = jobs.key)"
                    " ORDER BY published_at, key LIMIT 1 FOR UPDATE SKIP LOCKED)"
                    " UPDATE jobs j SET owner = $6, ready_at = {0} + $7, attempts = j.attempts + 1"
                    " FROM next WHERE j.key = next.key RETURNING j.key, j.backend, j.hardware,"
                    " j.subgraph, j.machine, j.threads, j.backend_version, j.request",
                    kNow)
            .c_str(),
        {valid_utf8(filter.machine), filter.max_threads, filter.claimable_for_s,
         json_list(filter.backend_versions), json_list(filter.keys), owner, lease_s},
        /*binary=*/true);
    if (PQntuples(r.get()) == 0) return std::nullopt;
    PGresult* p = r.get();
    auto bytes = [&](int column) {
      return std::string(PQgetvalue(p, 0, column), static_cast<size_t>(PQgetlength(p, 0, column)));
    };
    MeasureJob j;
    j.row.key = bytes(0);
    j.row.backend = bytes(1);
    j.row.hardware = bytes(2);
    j.row.subgraph = bytes(3);
    j.machine = bytes(4);
    uint32_t threads = 0;  // int4, network order
    std::memcpy(&threads, PQgetvalue(p, 0, 5), sizeof threads);
    j.threads = static_cast<int>(ntohl(threads));
    j.backend_version = bytes(6);
    j.request = bytes(7);
    return j;
  });
}

void PostgresCostDb::publish(const std::vector<MeasureJob>& jobs) {
  transaction([&] {
    for (const MeasureJob& j : jobs)
      run(fmt::format("INSERT INTO jobs (key, backend, hardware, subgraph, machine, threads,"
                      " backend_version, request, owner, ready_at, attempts, published_at)"
                      " SELECT $1, $2, $3, $4, $5, $6, $7, $8, NULL, {0}, 0, {0}"
                      " WHERE NOT EXISTS (SELECT 1 FROM costs WHERE key = $1)"
                      " ON CONFLICT (key) DO UPDATE SET request = excluded.request"
                      " WHERE length(jobs.request) IS DISTINCT FROM length(excluded.request)",
                      kNow)
              .c_str(),
          {j.row.key, valid_utf8(j.row.backend), valid_utf8(j.row.hardware),
           valid_utf8(j.row.subgraph), valid_utf8(j.machine), j.threads,
           valid_utf8(j.backend_version), Param::bytes(j.request)});
  });
}

void PostgresCostDb::release(const std::string& key, const std::string& owner) {
  statement([&] {
    run(fmt::format("UPDATE jobs SET owner = NULL, ready_at = {} WHERE key = $1 AND owner = $2",
                    kNow)
            .c_str(),
        {key, owner});
  });
}

int64_t PostgresCostDb::renew(const std::string& owner, double lease_s) {
  return statement([&] {
    Result r = run(fmt::format("UPDATE jobs SET ready_at = {} + $2 WHERE owner = $1", kNow).c_str(),
                   {owner, lease_s});
    return static_cast<int64_t>(std::atoll(PQcmdTuples(r.get())));
  });
}

JobCounts PostgresCostDb::job_counts(const std::vector<std::string>& keys) {
  return statement([&] {
    Result r = run(fmt::format("SELECT count(*) FILTER (WHERE ready_at <= {0}),"
                               " count(*) FILTER (WHERE ready_at > {0}) FROM jobs"
                               " WHERE $1::text = '[]' OR key = ANY(ARRAY("
                               "SELECT json_array_elements_text($1::json)))",
                               kNow)
                       .c_str(),
                   {json_list(keys)});
    JobCounts c;
    c.queued = std::atoll(PQgetvalue(r.get(), 0, 0));
    c.claimed = std::atoll(PQgetvalue(r.get(), 0, 1));
    return c;
  });
}

void PostgresCostDb::scan(const std::function<void(const StoredRecord&)>& visit) {
  transaction([&] {
    Result r =
        run(fmt::format("SELECT key, backend, hardware, subgraph, {} FROM costs ORDER BY key",
                        kRecordColumns)
                .c_str());
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      StoredRecord row{PQgetvalue(r.get(), i, 0), PQgetvalue(r.get(), i, 1),
                       PQgetvalue(r.get(), i, 2), PQgetvalue(r.get(), i, 3),
                       record_from(r.get(), i, 4)};
      visit(row);
    }
  });
}

int64_t PostgresCostDb::import(const std::vector<StoredRecord>& rows) {
  return transaction([&] {
    int64_t added = 0;
    for (const StoredRecord& row : rows) {
      Result r = run(kInsertRecord, record_params(row));
      added += std::atoll(PQcmdTuples(r.get()));
    }
    return added;
  });
}

}  // namespace

std::unique_ptr<CostDbEngine> open_postgres_cost_db(const std::string& url,
                                                    const std::string& shown, CostDb::Open mode) {
  return std::make_unique<PostgresCostDb>(url, shown, mode);
}

}  // namespace collage
