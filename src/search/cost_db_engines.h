// The cost database's engines (search/cost_db.h), opened by CostDb from a location, and what
// both share: the schema's versions and the key migration of version 3.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "search/cost_db.h"

namespace collage {

// A file path; creates, migrates or (when unusable) moves the file aside.
std::unique_ptr<CostDbEngine> open_sqlite_cost_db(const std::string& path, CostDb::Open mode);
// A postgresql:// URL; creates or migrates the schema, refuses a foreign or corrupt one.
// Built only with libpq (COLLAGE_HAVE_POSTGRES); otherwise an error saying so.
std::unique_ptr<CostDbEngine> open_postgres_cost_db(const std::string& url,
                                                    const std::string& shown_as, CostDb::Open mode);

// The columns of the costs table at each schema version (a table with other columns is not
// ours, whatever its version says).
std::set<std::string> costs_columns(int version);
std::set<std::string> jobs_columns();

// Schema 3 re-keys records: keys digest the subgraph text and the hardware fingerprint, and
// before 3 the digest was FNV-1a with a wrong offset basis. The new key of a record stored
// under `old_key` with this text and fingerprint; "" when the old key is not what schema 2
// made of them (then it was never found again anyway).
std::string rekey_for_v3(const std::string& old_key, const std::string& subgraph,
                         const std::string& hardware);
// Whole-plan records embed the model hash (the same digest) in their text: not re-keyable.
bool embeds_model_hash(const std::string& record_kind);

// The error for a database opened with CostDb::Open::kExisting that is not of this schema
// version (or not a cost database at all).
[[noreturn]] void refuse_other_version(const std::string& shown, const std::string& why);

// Seconds since the epoch (SQLite's clock for leases: one machine shares one file).
double unix_now_s();

}  // namespace collage
