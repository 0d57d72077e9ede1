// The persistent cost database (SQLite): one row per (subgraph, backend+version, hardware).
// A second tuning of the same model, or of one sharing layers, re-measures nothing known.
// WAL mode + a busy timeout let several `collage tune` processes share one file; a file
// that is corrupt or has a foreign schema is moved aside (with a warning) and recreated.
#pragma once

#include <limits>
#include <optional>
#include <string>

struct sqlite3;

namespace collage {

struct CostRecord {
  double milliseconds = 0;  // +inf when the candidate failed
  bool ok = true;
  std::string reason;  // why it failed
  // Seconds the measurement took (for whole-plan records: what the evolutionary search is
  // charged when it finds the record again, see Tuner::search_graph_level). 0 = unknown.
  double spent_s = 0;

  // A failure: infinite cost, with the reason kept.
  static CostRecord failure(std::string why) {
    CostRecord r;
    r.milliseconds = std::numeric_limits<double>::infinity();
    r.ok = false;
    r.reason = std::move(why);
    return r;
  }
};

class CostDb {
 public:
  static constexpr int kSchemaVersion = 2;  // 2 added spent_s

  explicit CostDb(const std::string& path);
  ~CostDb();
  CostDb(const CostDb&) = delete;
  CostDb& operator=(const CostDb&) = delete;

  // $XDG_CACHE_HOME/collage/costs.db or ~/.cache/collage/costs.db.
  static std::string default_path();
  static std::string make_key(const std::string& canonical_subgraph, const std::string& backend,
                              const std::string& backend_version, const std::string& hardware);

  std::optional<CostRecord> find(const std::string& key) const;
  void put(const std::string& key, const std::string& backend, const std::string& hardware,
           const std::string& subgraph_text, const CostRecord& record);
  int64_t size() const;
  int64_t size(const std::string& backend) const;  // rows of one backend (or record kind)
  const std::string& path() const { return path_; }
  // Set when the file found at open was unusable and had to be moved aside.
  const std::string& moved_aside_to() const { return moved_aside_to_; }

 private:
  bool open_and_check();
  void create_schema();
  void migrate_from_1();
  void exec(const char* sql);

  std::string path_;
  std::string moved_aside_to_;
  sqlite3* db_ = nullptr;
};

}  // namespace collage
