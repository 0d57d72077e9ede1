#include "search/cost_db.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <regex>

#include "collage/error.h"
#include "ir/canonical.h"
#include "search/cost_db_engines.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// A URL with its password replaced by "***", for messages and reports.
std::string hide_password(const std::string& url) {
  static const std::regex password(R"(^(postgres(ql)?://[^:/@]*:)[^@]*@)");
  return std::regex_replace(url, password, "$1***@");
}

}  // namespace

std::set<std::string> costs_columns(int version) {
  std::set<std::string> c = {"key", "backend", "hardware", "subgraph", "cost_ms", "ok", "reason"};
  if (version >= 2) c.insert("spent_s");
  if (version >= 3) c.insert("measured_by");
  return c;
}

std::set<std::string> jobs_columns() {
  return {"key",     "backend", "hardware", "subgraph", "machine",     "threads", "backend_version",
          "request", "owner",   "ready_at", "attempts", "published_at"};
}

std::string rekey_for_v3(const std::string& old_key, const std::string& subgraph,
                         const std::string& hardware) {
  // digest(text) | backend | version | digest(hardware); the middle may hold anything.
  const size_t first = old_key.find('|'), last = old_key.rfind('|');
  if (first == std::string::npos || last == first) return "";
  if (old_key.compare(0, first, digest_before_schema_3(subgraph)) != 0 ||
      old_key.compare(last + 1, std::string::npos, digest_before_schema_3(hardware)) != 0)
    return "";
  return digest(subgraph) + old_key.substr(first, last + 1 - first) + digest(hardware);
}

bool embeds_model_hash(const std::string& record_kind) {
  return record_kind == "plan" || record_kind == "plan-side-by-side";
}

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void refuse_other_version(const std::string& shown, const std::string& why) {
  fail(ErrorKind::kInvalidArgument,
       "cost database {}: {}; this collage reads and writes schema {} only (records of another "
       "schema are keyed differently). A collage cost database of an older schema is migrated "
       "by opening it for writing once, e.g. `collage costs stats --cost-db {}`",
       shown, why, CostDb::kSchemaVersion, shown);
}

#ifndef COLLAGE_HAVE_POSTGRES
std::unique_ptr<CostDbEngine> open_postgres_cost_db(const std::string&, const std::string& shown,
                                                    CostDb::Open) {
  fail(ErrorKind::kUnsupported,
       "cost database {}: this collage was built without PostgreSQL support (libpq was not "
       "found when it was configured: install libpq-dev, see scripts/install-deps.sh, and "
       "rebuild)",
       shown);
}
bool CostDb::postgres_available() {
  return false;
}
#else
bool CostDb::postgres_available() {
  return true;
}
#endif

bool CostDb::is_url(const std::string& location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
}

std::string CostDb::shown(const std::string& location) {
  return is_url(location) ? hide_password(location) : location;
}

CostDb::CostDb(const std::string& location, Open mode)
    : path_(shown(location)),
      engine_(is_url(location) ? open_postgres_cost_db(location, path_, mode)
                               : open_sqlite_cost_db(location, mode)) {}

CostDb::~CostDb() = default;

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

const std::string& CostDb::owner() {
  // Made again in a forked child (a new pid), which must not pass for its parent. The lease
  // keeper's thread asks too.
  static std::mutex mutex;
  static pid_t pid = 0;
  static std::string name;
  std::lock_guard<std::mutex> lock(mutex);
  if (pid != ::getpid()) {
    pid = ::getpid();
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
    // The nonce tells apart two processes that got one pid (a reboot, another container).
    std::random_device random;
    name = fmt::format("{}:{}:{:06x}", host, pid, random() & 0xffffff);
  }
  return name;
}

std::optional<CostRecord> CostDb::find(const std::string& key) const {
  return engine_->find(key);
}

CostRecord CostDb::put(const std::string& key, const std::string& backend,
                       const std::string& hardware, const std::string& subgraph_text,
                       const CostRecord& record) {
  StoredRecord row{key, backend, hardware, subgraph_text, record};
  if (row.record.measured_by.empty()) row.record.measured_by = owner();
  return engine_->put(row);
}

int64_t CostDb::size() const {
  return engine_->count(nullptr);
}

int64_t CostDb::size(const std::string& backend) const {
  return engine_->count(&backend);
}

}  // namespace collage
