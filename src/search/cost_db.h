// The persistent cost database (SQLite): one row per (subgraph, backend+version, hardware).
// A second tuning of the same model, or of one sharing layers, re-measures nothing known.
//
// Several `collage tune` processes share one file (WAL mode, a busy timeout). Opening is
// careful because they may open it at the same moment (docs/DESIGN.md, "Cost database"):
// the schema is inspected in one read transaction and created or migrated in one write
// transaction that checks again; only what SQLite reports as not a database or corrupt, or
// a schema that is not collage's, makes the file unusable, and such a file is moved aside
// (kept for inspection) under an exclusive lock on `<path>.lock`, which every collage
// process holds shared while it has the database open: a file another collage process uses
// is never moved. A database that stays locked is an error naming the process holding it.
#pragma once

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
  // Stores `record` under `key` unless the key already has one (another process measured it
  // meanwhile): the first record written wins, so every reader of a key sees one value.
  // Returns the record the database now holds.
  CostRecord put(const std::string& key, const std::string& backend, const std::string& hardware,
                 const std::string& subgraph_text, const CostRecord& record);
  int64_t size() const;
  int64_t size(const std::string& backend) const;  // rows of one backend (or record kind)
  const std::string& path() const { return path_; }
  // Set when the file found at open was unusable and had to be moved aside.
  const std::string& moved_aside_to() const { return moved_aside_to_; }

 private:
  // Opens the connection and makes the schema current. False (with the reason) when the
  // file is not a usable collage database; throws Error for anything else (busy, I/O).
  bool open_usable(std::string& why);
  void close_connection();
  void move_aside(const std::string& why);

  std::string path_;
  std::string moved_aside_to_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;  // <path>.lock, flock()ed shared while open
};

}  // namespace collage
