// The persistent cost database: one record per (subgraph, backend+version, hardware with
// thread count), so a second tuning of the same model, or of one sharing layers, re-measures
// nothing known; plus a queue of measurement jobs, through which several tuners on one
// machine never measure one key twice and `collage measure-worker` processes on other
// machines measure for a `tune --distributed` (docs/DESIGN.md, "Cost database").
//
// Two engines behind one interface (CostDbEngine), one schema version and one migration
// path: SQLite, the embedded default (a file), and PostgreSQL (a `postgresql://` or
// `postgres://` URL; built when libpq was found). CostDb picks the engine from the location.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace collage {

// Ends the key text of every measured kernel cost and timed plan: the conditions they were
// timed under, so that costs timed under others are other measurements.
// - Denormals flushed to zero (runtime/threads.h): a random-weight EfficientNet-B0 ran 15 %
//   slower with denormals.
// - Threads unbound: until libxsmm's OMP_PROC_BIND=TRUE was taken back out of the
//   environment (backends/libxsmm/tiled_gemm.cc), the measure worker inherited it and ran
//   the thread pools made from its main thread (XNNPACK's, Halide's) on one core.
// - Idle pools asleep: until XNNPACK's kernels put their workers to sleep as they end
//   (backends/xnnpack/thread_pool.h), a kernel timed within ~13 ms after one shared a core
//   with them (vit-tiny's patch conv confirmed at 0.69 ms, first timed at 0.012).
inline constexpr const char* kTimingConditionsMark =
    "denormals flushed to zero\nthreads unbound\nidle pools asleep\n";

struct CostRecord {
  double milliseconds = 0;  // +inf when the candidate failed
  bool ok = true;
  // Why it failed; on a record that is ok, a note on how it was taken (a recheck kept under
  // its plan's bound, a check passed within the subgraph's own sensitivity), else empty.
  std::string reason;
  // Seconds the measurement took (for whole-plan records: what the evolutionary search is
  // charged when it finds the record again, see Tuner::search_graph_level). 0 = unknown.
  double spent_s = 0;
  std::string measured_by;  // the process that measured it (CostDb::owner()); "" = unknown

  // A failure: infinite cost, with the reason kept.
  static CostRecord failure(std::string why) {
    CostRecord r;
    r.milliseconds = std::numeric_limits<double>::infinity();
    r.ok = false;
    r.reason = std::move(why);
    return r;
  }
};

// A row of the costs table as stored: the record and what it is keyed and labelled by.
struct StoredRecord {
  std::string key;
  std::string backend;   // backend[/variant], or a record kind ("plan", "step-overhead")
  std::string hardware;  // the hardware fingerprint with the thread count
  std::string subgraph;  // the text the key digests
  CostRecord record;
};

// A kernel measurement to be made, as the job queue holds it.
struct MeasureJob {
  StoredRecord row;             // where the result goes (row.record unused)
  std::string machine;          // the fingerprint without threads: who may measure it
  int threads = 1;              // the kernel's thread count
  std::string backend_version;  // "name@version" of the backend measuring it
  // The isolated worker's request (search/isolated_measurer.h): the subgraph and how to
  // measure it. Empty for a job only claimed to keep other tuners off the key.
  std::string request;
};

// Which jobs a measuring process may take.
struct JobFilter {
  std::string machine;                        // equal to the job's
  int max_threads = 1;                        // at least the job's
  std::vector<std::string> backend_versions;  // "name@version" it can measure
  std::vector<std::string> keys;              // only these (empty: any)
  double claimable_for_s = 0;                 // only jobs nobody has held for at least this long
};

struct JobCounts {
  int64_t queued = 0;   // claimable now (never claimed, released, or lease expired)
  int64_t claimed = 0;  // held under a live lease
};

// What claiming a key for measurement found.
struct Claim {
  enum class Result { kMine, kMeasured, kHeldElsewhere } result = Result::kMine;
  CostRecord record;  // kMeasured: the stored record
};

// One engine's storage (SQLite or PostgreSQL). Every call is its own transaction; errors
// are collage::Error(kIo) naming the database.
class CostDbEngine {
 public:
  virtual ~CostDbEngine() = default;
  virtual std::optional<CostRecord> find(const std::string& key) = 0;
  // The records of those of `keys` that have one.
  virtual std::vector<std::pair<std::string, CostRecord>> find_many(
      const std::vector<std::string>& keys) = 0;
  // Inserts `row` unless its key has a record (the first record of a key wins), deletes
  // the key's job, both in one transaction; returns the record now stored.
  virtual CostRecord put(const StoredRecord& row) = 0;
  virtual int64_t count(const std::string* backend) = 0;
  // In one transaction: the key's record if it has one; else the key's job, created or
  // taken over when claimable, now held by `owner` for `lease_s`; else kHeldElsewhere.
  virtual Claim claim(const MeasureJob& job, const std::string& owner, double lease_s) = 0;
  // The oldest claimable job `filter` allows, now held by `owner` (FOR UPDATE SKIP LOCKED
  // on PostgreSQL). Jobs whose key has a record meanwhile are deleted on the way.
  virtual std::optional<MeasureJob> claim_next(const JobFilter& filter, const std::string& owner,
                                               double lease_s) = 0;
  // Queues jobs (a key already queued or measured is left alone).
  virtual void publish(const std::vector<MeasureJob>& jobs) = 0;
  // Makes the key claimable again (its holder gives up without a record).
  virtual void release(const std::string& key, const std::string& owner) = 0;
  // Extends every lease `owner` holds; returns how many.
  virtual int64_t renew(const std::string& owner, double lease_s) = 0;
  virtual JobCounts job_counts(const std::vector<std::string>& keys) = 0;
  // Every record, in key order (export).
  virtual void scan(const std::function<void(const StoredRecord&)>& visit) = 0;
  // Inserts the rows whose keys have no record, in one transaction; returns how many.
  virtual int64_t import(const std::vector<StoredRecord>& rows) = 0;
  virtual std::string engine() const = 0;  // "sqlite" or "postgresql"
  virtual int schema_version() = 0;
  virtual std::string moved_aside_to() const { return ""; }
};

class CostDb {
 public:
  // 2 added spent_s. 3: measured_by, the jobs table, and keys digested with the real
  // FNV-1a offset basis (rows re-keyed on migration; see docs/DESIGN.md).
  static constexpr int kSchemaVersion = 3;

  enum class Open {
    kCreate,    // create, migrate, or (SQLite) move an unusable file aside: for tuning
    kWrite,     // create or migrate; an unusable file is an error, never moved aside
    kExisting,  // only a database of this schema version; refuse anything else (a source
                // to copy records from must not be changed, and its keys must be ours)
  };
  // A file path (SQLite) or a postgresql:// / postgres:// URL.
  explicit CostDb(const std::string& location, Open mode = Open::kCreate);
  ~CostDb();
  CostDb(const CostDb&) = delete;
  CostDb& operator=(const CostDb&) = delete;

  // $XDG_CACHE_HOME/collage/costs.db or ~/.cache/collage/costs.db.
  static std::string default_path();
  static bool is_url(const std::string& location);
  // `location` for messages: a URL's password hidden.
  static std::string shown(const std::string& location);
  // Whether this collage was built with the PostgreSQL engine (libpq).
  static bool postgres_available();
  static std::string make_key(const std::string& canonical_subgraph, const std::string& backend,
                              const std::string& backend_version, const std::string& hardware);
  // This process's name in the job queue and in records' measured_by: host:pid:start.
  static const std::string& owner();

  std::optional<CostRecord> find(const std::string& key) const;
  // Stores `record` under `key` unless the key already has one (another process measured it
  // meanwhile): the first record written wins, so every reader of a key sees one value.
  // Returns the record the database now holds.
  CostRecord put(const std::string& key, const std::string& backend, const std::string& hardware,
                 const std::string& subgraph_text, const CostRecord& record);
  int64_t size() const;
  int64_t size(const std::string& backend) const;  // rows of one backend (or record kind)
  // The location as given (a URL's password hidden), for messages and reports.
  const std::string& path() const { return path_; }
  // Set when the file found at open was unusable and had to be moved aside (SQLite).
  std::string moved_aside_to() const { return engine_->moved_aside_to(); }
  CostDbEngine& engine() const { return *engine_; }

 private:
  std::string path_;
  std::unique_ptr<CostDbEngine> engine_;
};

}  // namespace collage
