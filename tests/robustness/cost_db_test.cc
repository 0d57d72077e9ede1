// The cost database under abuse: two tuners writing one file at once, and files that are
// not (or no longer) ours. Complements tests/unit/search_test.cc (persistence, garbage file).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "ir/canonical.h"
#include "model_builder.h"
#include "search/cost_db.h"

namespace collage::robustness {
namespace {

namespace fs = std::filesystem;

void sql(const std::string& path, const std::string& statements) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, statements.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST(CostDbAbuse, ForeignDatabaseIsMovedAside) {
  TempDir dir;
  std::string path = dir.file("costs.db");
  sql(path, "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('alice');");
  CostDb db(path);
  ASSERT_FALSE(db.moved_aside_to().empty());
  EXPECT_TRUE(fs::exists(db.moved_aside_to()));
  db.put("k", "b", "hw", "t", CostRecord{2.0, true, ""});
  EXPECT_EQ(db.size(), 1);
}

TEST(CostDbAbuse, SameVersionButForeignCostsTable) {
  // Our schema version (or the one before, which is migrated), but a `costs` table of other
  // columns: must not fail at first write.
  for (int version : {1, CostDb::kSchemaVersion}) {
    TempDir dir;
    std::string path = dir.file("costs.db");
    sql(path,
        "CREATE TABLE costs (id INTEGER); PRAGMA user_version = " + std::to_string(version) + ";");
    CostDb db(path);
    EXPECT_FALSE(db.moved_aside_to().empty()) << "version " << version;
    db.put("k", "b", "hw", "t", CostRecord{2.0, true, ""});
    EXPECT_TRUE(db.find("k"));
  }
}

TEST(CostDbAbuse, Version1IsMigratedKeepingItsRows) {
  TempDir dir;
  std::string path = dir.file("costs.db");
  sql(path,
      "CREATE TABLE costs (key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
      " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
      " measured_at TEXT DEFAULT CURRENT_TIMESTAMP);"
      "INSERT INTO costs (key, backend, hardware, subgraph, cost_ms, ok, reason)"
      " VALUES ('old', 'onednn', 'hw', 'text', 1.5, 1, '');"
      "PRAGMA user_version = 1;");
  {
    CostDb db(path);
    EXPECT_TRUE(db.moved_aside_to().empty());
    std::optional<CostRecord> old = db.find("old");
    ASSERT_TRUE(old);
    EXPECT_DOUBLE_EQ(old->milliseconds, 1.5);
    EXPECT_EQ(old->spent_s, 0.0);
    CostRecord fresh{2.5, true, ""};
    fresh.spent_s = 0.75;
    db.put("new", "plan", "hw", "text", fresh);
  }
  CostDb reopened(path);
  EXPECT_TRUE(reopened.moved_aside_to().empty());
  EXPECT_EQ(reopened.size(), 2);
  std::optional<CostRecord> fresh = reopened.find("new");
  ASSERT_TRUE(fresh);
  EXPECT_DOUBLE_EQ(fresh->spent_s, 0.75);
}

// The published FNV-1a 64 test vectors (offset basis 0xcbf29ce484222325): what keys and
// model hashes are made of since schema 3.
TEST(CostDbKeys, DigestIsFnv1a64) {
  EXPECT_EQ(digest(""), "cbf29ce484222325");
  EXPECT_EQ(digest("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(digest("foobar"), "85944171f73967e8");
}

// Schema 3 fixed the digest keys are made of (FNV-1a's offset basis). A version-2 file keeps
// its kernel records under their new keys, drops whole-plan latencies (their text holds the
// old model hash), and keeps rows whose key it cannot recompute as they were.
TEST(CostDbAbuse, Version2IsMigratedToTheFixedDigest) {
  TempDir dir;
  std::string path = dir.file("costs.db");
  const std::string text = "Relu f32[4]\n", hw = "some cpu | avx2 | 1 threads";
  const std::string old_key =
      digest_before_schema_3(text) + "|onednn|2.6.3|" + digest_before_schema_3(hw);
  ASSERT_NE(old_key, CostDb::make_key(text, "onednn", "2.6.3", hw));
  sql(path,
      "CREATE TABLE costs (key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
      " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
      " measured_at TEXT DEFAULT CURRENT_TIMESTAMP, spent_s REAL DEFAULT 0);"
      "INSERT INTO costs (key, backend, hardware, subgraph, cost_ms, ok, reason) VALUES ('" +
          old_key + "', 'onednn', '" + hw + "', '" + text +
          "', 1.5, 1, ''),"
          " ('planbefore', 'plan', 'hw', 'plan 0123 threads 1', 9.0, 1, ''),"
          " ('odd', 'blas', 'hw', 'text', 2.5, 1, '');"
          "PRAGMA user_version = 2;");
  CostDb db(path);
  EXPECT_TRUE(db.moved_aside_to().empty());
  std::optional<CostRecord> kernel = db.find(CostDb::make_key(text, "onednn", "2.6.3", hw));
  ASSERT_TRUE(kernel);
  EXPECT_DOUBLE_EQ(kernel->milliseconds, 1.5);
  EXPECT_FALSE(db.find(old_key));
  EXPECT_FALSE(db.find("planbefore"));
  EXPECT_TRUE(db.find("odd"));
  EXPECT_EQ(db.size(), 2);
}

TEST(CostDbAbuse, NewerSchemaIsMovedAside) {
  TempDir dir;
  std::string path = dir.file("costs.db");
  sql(path, "CREATE TABLE costs (x); PRAGMA user_version = 99;");
  CostDb db(path);
  EXPECT_FALSE(db.moved_aside_to().empty());
  db.put("k", "b", "hw", "t", CostRecord{2.0, true, ""});
  EXPECT_EQ(db.size(), 1);
}

TEST(CostDbAbuse, TruncatedDatabaseIsMovedAside) {
  TempDir dir;
  std::string path = dir.file("costs.db");
  {
    CostDb db(path);
    for (int i = 0; i < 200; ++i)
      db.put("k" + std::to_string(i), "b", "hw", std::string(200, 'x'), CostRecord{1, true, ""});
  }
  fs::resize_file(path, fs::file_size(path) / 2);
  CostDb db(path);
  EXPECT_FALSE(db.moved_aside_to().empty());
  EXPECT_EQ(db.size(), 0);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Issue 21: processes opening one new file at the same moment. One of them creates the
// schema while the others inspect the file; a reader that saw the version before the
// creator committed and its table after took the file for someone else's and moved it
// aside (taking the other processes' rows with it). Here every process is released at the
// same instant (they all block on one pipe until it closes), many rounds.
TEST(CostDbAbuse, ProcessesOpeningOneFreshFileAtOnceAllKeepIt) {
  constexpr int kProcesses = 8, kRounds = 25;
  for (int round = 0; round < kRounds; ++round) {
    TempDir dir;
    const std::string path = dir.file("costs.db");
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < kProcesses; ++i) {
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(go[1]);
        char c;
        (void)!::read(go[0], &c, 1);  // returns at EOF: when the parent closes its end
        int status = 0;
        try {
          CostDb db(path);
          if (!db.moved_aside_to().empty()) status = 3;
          db.put("k" + std::to_string(i), "b", "hw", "t", CostRecord{1.0 + i, true, ""});
        } catch (const std::exception& e) {
          std::fprintf(stderr, "process %d: %s\n", i, e.what());
          status = 4;
        } catch (...) {
          status = 4;
        }
        _exit(status);
      }
      children.push_back(pid);
    }
    close(go[0]);
    close(go[1]);
    std::vector<int> statuses;
    for (pid_t pid : children) {
      int raw = 0;
      waitpid(pid, &raw, 0);
      statuses.push_back(WIFEXITED(raw) ? WEXITSTATUS(raw) : 100 + WTERMSIG(raw));
    }
    EXPECT_EQ(statuses, std::vector<int>(kProcesses, 0))
        << "round " << round << ": 3 = moved aside, 4 = failed to open";
    for (const auto& entry : fs::directory_iterator(dir.path()))
      EXPECT_EQ(entry.path().filename().string().find(".unusable-"), std::string::npos)
          << "round " << round << ": " << entry.path();
    CostDb db(path);
    EXPECT_EQ(db.size(), kProcesses) << "round " << round << ": rows were lost";
    if (HasFailure()) break;
  }
}

TEST(CostDbAbuse, TwoConcurrentTunersShareOneDatabase) {
  TempDir dir;
  ModelBuilder b;
  b.input("x", kFloat, {8, 16});
  b.node("Relu", {"x"}, {"a"}, "r1");
  b.node("Sigmoid", {"a"}, {"c"}, "s1");
  b.node("Add", {"a", "c"}, {"y"}, "add");
  b.output("y", kFloat, {8, 16});
  std::string model = dir.write("m.onnx", b.bytes());
  std::string db = dir.file("costs.db");
  auto tune = [&](int i) {
    return std::string(COLLAGE_CLI) + " tune " + model + " -o " +
           dir.file("p" + std::to_string(i)) + " --cost-db " + db +
           " --optimizer op-level --threads 1 >" + dir.file("out" + std::to_string(i)) + " 2>&1";
  };
  // Both at once; each one's exit status separately.
  std::string script = tune(1) + " & p1=$!; " + tune(2) + " & p2=$!; wait $p1; a=$?; wait $p2; " +
                       "b=$?; exit $((a * 16 + b))";
  int raw = std::system(("bash -c '" + script + "'").c_str());
  ASSERT_TRUE(WIFEXITED(raw));
  EXPECT_EQ(WEXITSTATUS(raw), 0) << read(dir.file("out1")) << read(dir.file("out2"));
  std::smatch m;
  std::string out1 = read(dir.file("out1"));
  ASSERT_TRUE(std::regex_search(out1, m, std::regex("(\\d+) candidates"))) << out1;
  int candidates = std::stoi(m[1]);
  int measured = 0;
  for (const char* out : {"out1", "out2"}) {
    std::string text = read(dir.file(out));
    ASSERT_TRUE(std::regex_search(text, m, std::regex("\\((\\d+) measured"))) << text;
    measured += std::stoi(m[1]);
  }
  // One row per distinct (subgraph, backend): whoever measured first, nothing twice or lost.
  CostDb costs(db);
  EXPECT_TRUE(costs.moved_aside_to().empty());
  // Besides kernels the DB keeps whole-plan latencies, the machine's step overhead and the
  // chosen kernels' confirmations (one record per key, whichever tuner stored it first).
  const int64_t confirmations = costs.size("confirmation");
  EXPECT_GT(confirmations, 0);
  const int64_t kernels = costs.size() - costs.size("plan") - costs.size("plan-side-by-side") -
                          costs.size("step-overhead") - confirmations;
  EXPECT_GT(kernels, 0);
  EXPECT_LE(kernels, candidates);
  // Each key measured by one of the two (they claim keys in the job queue).
  EXPECT_EQ(measured, kernels);
  EXPECT_EQ(costs.size("step-overhead"), 1);
  // A third run finds everything measured.
  int third = std::system(tune(3).c_str());
  EXPECT_EQ(third, 0);
  EXPECT_NE(read(dir.file("out3")).find("(0 measured"), std::string::npos)
      << read(dir.file("out3"));
}

}  // namespace
}  // namespace collage::robustness
