// collage costs stats [--cost-db DB] [--json]
// collage costs export [--cost-db SRC] DEST      (copy SRC's records into DEST)
// collage costs import [--cost-db DEST] SRC      (copy SRC's records into DEST)
// A cost database is a SQLite file or a postgresql:// URL, so these move records between
// two SQLite files, or between SQLite and PostgreSQL, for those without a shared server.
// The source must be of this collage's schema version (it is read, never migrated); the
// destination is created or migrated, and keeps its own record of a key it already has.
#include <fmt/core.h>

#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "collage/version.h"
#include "search/cost_db.h"

namespace collage::cli {
namespace {

struct CostsOptions {
  std::string cost_db;  // empty: CostDb::default_path()
  std::string other;    // export: the destination; import: the source
  bool json = false;
};

std::string location(const CostsOptions& o) {
  return o.cost_db.empty() ? CostDb::default_path() : o.cost_db;
}

int stats(const CostsOptions& o) {
  CostDb db(location(o), CostDb::Open::kWrite);
  std::map<std::string, int64_t> kinds, machines;
  int64_t records = 0, failed = 0;
  db.engine().scan([&](const StoredRecord& row) {
    ++records;
    ++kinds[row.backend];
    ++machines[row.hardware];
    failed += !row.record.ok;
  });
  JobCounts jobs = db.engine().job_counts({});
  if (o.json) {
    nlohmann::json j = {{"format", "collage-costs"},
                        {"version", 1},
                        {"collage_version", version()},
                        {"cost_db", db.path()},
                        {"engine", db.engine().engine()},
                        {"schema", db.engine().schema_version()},
                        {"records", records},
                        {"failed", failed},
                        {"kinds", kinds},
                        {"hardware", machines},
                        {"jobs_queued", jobs.queued},
                        {"jobs_claimed", jobs.claimed}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("cost database {} ({}, schema {}): {} records ({} of failed candidates)\n", db.path(),
             db.engine().engine(), db.engine().schema_version(), records, failed);
  fmt::print("jobs: {} waiting to be claimed, {} being measured\n", jobs.queued, jobs.claimed);
  fmt::print("\n  {:<28} {:>8}\n", "kind (backend)", "records");
  for (const auto& [kind, n] : kinds) fmt::print("  {:<28} {:>8}\n", kind, n);
  fmt::print("\n  {:>8}  hardware\n", "records");
  for (const auto& [hw, n] : machines) fmt::print("  {:>8}  {}\n", n, hw);
  return 0;
}

int copy(const std::string& from, const std::string& to, bool json) {
  std::vector<StoredRecord> rows;
  std::string shown_from;
  {
    CostDb source(from, CostDb::Open::kExisting);
    shown_from = source.path();
    source.engine().scan([&](const StoredRecord& row) { rows.push_back(row); });
  }
  CostDb dest(to, CostDb::Open::kWrite);
  int64_t added = dest.engine().import(rows);
  const int64_t kept = static_cast<int64_t>(rows.size()) - added;
  if (json) {
    fmt::print("{}\n", nlohmann::json({{"format", "collage-costs-copy"},
                                       {"version", 1},
                                       {"from", shown_from},
                                       {"to", dest.path()},
                                       {"records", rows.size()},
                                       {"added", added},
                                       {"already_there", kept}})
                           .dump(2));
    return 0;
  }
  fmt::print("copied {} records from {} to {} ({} added, {} already there, kept as they were)\n",
             rows.size(), shown_from, dest.path(), added, kept);
  return 0;
}

}  // namespace

Action add_costs_command(CLI::App& app) {
  auto o = std::make_shared<CostsOptions>();
  auto which = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "costs", "inspect a cost database, or copy its records to or from another one");
  cmd->require_subcommand(1);
  const char* db_help =
      "cost database: a SQLite file (default ~/.cache/collage/costs.db) or a "
      "postgresql://user@host/dbname URL";
  CLI::App* st = cmd->add_subcommand("stats", "records by kind and hardware, jobs in the queue");
  st->add_option("--cost-db", o->cost_db, db_help);
  st->add_flag("--json", o->json, "one JSON object on stdout");
  st->callback([which] { *which = "stats"; });
  CLI::App* ex = cmd->add_subcommand(
      "export", "copy every record of --cost-db into DEST (a SQLite file or URL)");
  ex->add_option("--cost-db", o->cost_db, db_help);
  ex->add_option("DEST", o->other, "the database to copy into")->required();
  ex->add_flag("--json", o->json, "one JSON object on stdout");
  ex->callback([which] { *which = "export"; });
  CLI::App* im = cmd->add_subcommand(
      "import", "copy every record of SRC (a SQLite file or URL) into --cost-db");
  im->add_option("--cost-db", o->cost_db, db_help);
  im->add_option("SRC", o->other, "the database to copy from")->required();
  im->add_flag("--json", o->json, "one JSON object on stdout");
  im->callback([which] { *which = "import"; });
  return [o, which] {
    if (*which == "stats") return stats(*o);
    if (*which == "export") return copy(location(*o), o->other, o->json);
    return copy(o->other, location(*o), o->json);
  };
}

}  // namespace collage::cli
