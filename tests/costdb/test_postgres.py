"""The PostgreSQL cost database and distributed measurement (issue 19), against a real
server this test starts in a temporary folder (pg_server.py) and stops after. Skipped, with
the reason, only where the server binaries are absent.

- the schema is created once by processes starting at the same moment; a foreign, broken or
  newer schema is refused with a message saying what is wrong, and left untouched;
- `tune --distributed` with two and four `measure-worker` processes: the workers measure
  every key exactly once (their counts add up to the rows; each row names one of them), and
  the plan is the one a single-machine tune makes from the same costs;
- a worker killed with SIGKILL while it holds a job loses nothing: another worker measures
  that job once its lease expires, and the tune completes;
- a connection the server ends (an administrator, a restart) is reset: the tuner waiting
  for its jobs and a worker holding one both go on, and every job is measured once;
- `costs export/import` between SQLite and PostgreSQL and between two SQLite files, refusing
  a source of another schema version.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import pg_server

MODEL = "mobilenet-tiny"
# Record kinds that are not one kernel's cost (src/search/plan_records.h).
NOT_KERNELS = ("('plan', 'plan-side-by-side', 'step-overhead', 'stage-overhead', 'copy', "
               "'confirmation')")

pytestmark = pytest.mark.skipif(bool(pg_server.missing_reason()),
                                reason=pg_server.missing_reason() or "-")


@pytest.fixture(scope="module")
def pg():
    server = pg_server.PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def model(cli, tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / f"{MODEL}.onnx"
    subprocess.run([cli, "zoo", MODEL, "-o", path], check=True, capture_output=True)
    return str(path)


def run(cli, *args, check=True):
    proc = subprocess.run([cli, *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"collage {args} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def tune_args(model, db, plan, *extra):
    # --calm-wait 0: tuners and workers run at once here, each the others' load.
    return ["tune", model, "-o", plan, "--cost-db", db, "--optimizer", "op-level", "--budget",
            "0", "--threads", "1", "--backends", "onednn,xnnpack", "--json", "--calm-wait", "0",
            *extra]


def start_worker(cli, url, *extra):
    return subprocess.Popen([cli, "measure-worker", "--cost-db", url, "--threads", "1", "--json",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_worker(proc):
    """SIGTERM: the worker finishes the job at hand and prints its summary."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def kernel_rows(pg, db):
    return int(pg.psql(f"SELECT count(*) FROM costs WHERE backend NOT IN {NOT_KERNELS}", db))


def measured_by(pg, db):
    """{owner: kernel rows it measured}."""
    rows = pg.psql(f"SELECT measured_by, count(*) FROM costs WHERE backend NOT IN {NOT_KERNELS}"
                   " GROUP BY measured_by", db)
    return {line.split("|")[0]: int(line.split("|")[1]) for line in rows.splitlines()}


def test_version_says_postgresql_is_built(cli):
    version = run(cli, "--version").stdout
    assert "cost databases: sqlite, postgresql" in version, version


def test_schema_is_created_once_by_processes_starting_together(cli, pg):
    url = pg.create_database("together")
    procs = [subprocess.Popen([cli, "costs", "stats", "--cost-db", url, "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    for p in procs:
        out, err = p.communicate()
        assert p.returncode == 0, err
        assert json.loads(out)["schema"] == 3
    assert pg.psql("SELECT version FROM collage_schema", "together").strip() == "3"


@pytest.mark.parametrize("name,sql,message", [
    ("foreign", "CREATE TABLE costs (id integer)", "no collage_schema table: not collage's"),
    ("broken", "CREATE TABLE collage_schema (version integer); INSERT INTO collage_schema"
     " VALUES (3), (3)", "collage_schema holds 2 rows"),
    ("missing", "CREATE TABLE collage_schema (version integer); INSERT INTO collage_schema"
     " VALUES (3); CREATE TABLE costs (key text)", "has no column"),
    ("newer", "CREATE TABLE collage_schema (version integer); INSERT INTO collage_schema"
     " VALUES (99)", "schema 99 is newer"),
])
def test_a_foreign_or_broken_schema_is_refused_and_left_alone(cli, pg, model, tmp_path, name,
                                                              sql, message):
    url = pg.create_database(name)
    pg.psql(sql, name)
    before = pg.psql("SELECT table_name FROM information_schema.tables WHERE table_schema ="
                     " 'public' ORDER BY 1", name)
    for args in (["costs", "stats", "--cost-db", url],
                 tune_args(model, url, tmp_path / "p.json")):
        proc = run(cli, *args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "not usable" in proc.stderr, proc.stderr
    after = pg.psql("SELECT table_name FROM information_schema.tables WHERE table_schema ="
                    " 'public' ORDER BY 1", name)
    assert before == after


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_measure_every_candidate_once(cli, pg, model, tmp_path, workers):
    db = f"workers{workers}"
    url = pg.create_database(db)
    procs = [start_worker(cli, url) for _ in range(workers)]
    # A long claim timeout: the tuner leaves every job to the workers.
    tune = run(cli, *tune_args(model, url, tmp_path / "distributed.json", "--distributed",
                               "--claim-timeout", "120"))
    reports = [stop_worker(p) for p in procs]
    t = json.loads(tune.stdout)
    rows = kernel_rows(pg, db)
    assert t["measured"] == 0, t
    assert t["measured_elsewhere"] == rows, t
    assert t["measured_elsewhere"] + t["cache_hits"] == t["candidates"], t
    # Exactly once: the workers' counts add up to the rows, each row names its worker.
    assert sum(r["measured"] for r in reports) == rows, reports
    assert all(r["stored_elsewhere"] == 0 for r in reports), reports
    by = measured_by(pg, db)
    assert by == {r["owner"]: r["measured"] for r in reports if r["measured"]}, (by, reports)
    assert pg.psql("SELECT count(*) FROM jobs", db).strip() == "0"
    # The plan a single machine makes from the same costs: copy them into a SQLite file
    # and tune there (nothing left to measure, no plan to re-time).
    local = tmp_path / "local.db"
    run(cli, "costs", "export", "--cost-db", url, local)
    again = json.loads(run(cli, *tune_args(model, local, tmp_path / "local.json")).stdout)
    assert again["measured"] == 0 and again["plans_timed"] == 0, again
    distributed = json.load(open(tmp_path / "distributed.json"))
    single = json.load(open(tmp_path / "local.json"))
    assert distributed == single


def test_a_worker_killed_mid_job_loses_nothing(cli, pg, model, tmp_path):
    db = "killed"
    url = pg.create_database(db)
    run(cli, "costs", "stats", "--cost-db", url)  # the schema, before we look at its jobs
    victim = start_worker(cli, url, "--lease", "2")
    tune = subprocess.Popen([cli, *tune_args(model, url, tmp_path / "plan.json", "--distributed",
                                             "--claim-timeout", "120")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Stop the victim while it holds a job (SIGSTOP first, so that what we see is what it
    # holds when it dies), then kill it.
    held = []
    deadline = time.monotonic() + 120
    while not held:
        assert time.monotonic() < deadline, "the worker never held a job"
        assert tune.poll() is None, tune.communicate()
        owned = f"owner LIKE '%:{victim.pid}:%'"
        if pg.psql(f"SELECT count(*) FROM jobs WHERE {owned}", db).strip() == "0":
            time.sleep(0.01)
            continue
        victim.send_signal(signal.SIGSTOP)
        held = pg.psql(f"SELECT key FROM jobs WHERE {owned}", db).split()
        if not held:
            victim.send_signal(signal.SIGCONT)
    victim.kill()
    victim.wait()
    killed_owner = pg.psql(f"SELECT owner FROM jobs WHERE key = '{held[0]}'", db).strip()
    # Another worker takes the dead one's job over when its lease expires.
    rescuer = start_worker(cli, url, "--lease", "2")
    out, err = tune.communicate(timeout=300)
    assert tune.returncode == 0, err
    report = stop_worker(rescuer)
    t = json.loads(out)
    rows = kernel_rows(pg, db)
    assert t["measured"] == 0 and t["measured_elsewhere"] == rows, t
    by = measured_by(pg, db)
    assert set(by) <= {killed_owner, report["owner"]}, by
    # Nothing twice: the rescuer measured exactly the rows it is named on.
    assert report["measured"] == by[report["owner"]] and report["stored_elsewhere"] == 0
    for key in held:
        assert pg.psql(f"SELECT measured_by FROM costs WHERE key = '{key}'", db).strip() == \
            report["owner"]
    assert pg.psql("SELECT count(*) FROM jobs", db).strip() == "0"


def end_sessions(pg, db):
    """Ends every session of database `db` but psql's own, as an administrator or a server
    restart would; returns how many."""
    return int(pg.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                       f" WHERE datname = '{db}' AND pid <> pg_backend_pid()", db))


def test_lost_connections_are_reset_and_the_tune_goes_on(cli, pg, model, tmp_path):
    db = "lost"
    url = pg.create_database(db)
    run(cli, "costs", "stats", "--cost-db", url)
    tune = subprocess.Popen([cli, *tune_args(model, url, tmp_path / "plan.json", "--distributed",
                                             "--claim-timeout", "120")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The tuner has published its jobs and waits for workers: end its session.
    deadline = time.monotonic() + 120
    while pg.psql("SELECT count(*) FROM jobs", db).strip() == "0":
        assert time.monotonic() < deadline, "the tuner never published its jobs"
        assert tune.poll() is None, tune.communicate()
        time.sleep(0.01)
    assert end_sessions(pg, db) >= 1
    # A worker holding a job (stopped, so that it cannot finish it first) loses its session.
    worker = start_worker(cli, url)
    owned = f"owner LIKE '%:{worker.pid}:%'"
    while True:
        assert time.monotonic() < deadline, "the worker never held a job"
        assert tune.poll() is None, tune.communicate()
        if pg.psql(f"SELECT count(*) FROM jobs WHERE {owned}", db).strip() != "0":
            worker.send_signal(signal.SIGSTOP)
            if pg.psql(f"SELECT count(*) FROM jobs WHERE {owned}", db).strip() != "0":
                break
            worker.send_signal(signal.SIGCONT)
        time.sleep(0.005)
    assert end_sessions(pg, db) >= 2  # the tuner's (again) and the worker's
    worker.send_signal(signal.SIGCONT)
    out, err = tune.communicate(timeout=300)
    assert tune.returncode == 0, err
    assert "reconnected" in err, err
    report = stop_worker(worker)
    t = json.loads(out)
    rows = kernel_rows(pg, db)
    assert t["measured"] == 0 and t["measured_elsewhere"] == rows, t
    assert report["measured"] == rows and report["stored_elsewhere"] == 0, report
    assert pg.psql("SELECT count(*) FROM jobs", db).strip() == "0"


def sqlite_rows(path):
    con = sqlite3.connect(path)
    try:
        return sorted(con.execute("SELECT key, backend, hardware, subgraph, cost_ms, ok, reason,"
                                  " spent_s, measured_by FROM costs"))
    finally:
        con.close()


def test_export_and_import_between_sqlite_and_postgresql(cli, pg, model, tmp_path):
    a = tmp_path / "a.db"
    run(cli, "tune", model, "-o", tmp_path / "p.json", "--cost-db", a, "--optimizer", "op-level",
        "--budget", "0", "--threads", "1", "--backends", "onednn")
    url = pg.create_database("copies")
    first = json.loads(run(cli, "costs", "export", "--cost-db", a, url, "--json").stdout)
    assert first["records"] == first["added"] == len(sqlite_rows(a)) > 0, first
    again = json.loads(run(cli, "costs", "export", "--cost-db", a, url, "--json").stdout)
    assert again["added"] == 0 and again["already_there"] == first["records"], again
    b = tmp_path / "b.db"
    run(cli, "costs", "import", "--cost-db", b, url)
    assert sqlite_rows(b) == sqlite_rows(a)
    # Between two SQLite files, into one that has records of its own: both kept.
    c = tmp_path / "c.db"
    run(cli, "tune", model, "-o", tmp_path / "q.json", "--cost-db", c, "--optimizer", "op-level",
        "--budget", "0", "--threads", "1", "--backends", "xnnpack")
    own = sqlite_rows(c)
    merged = json.loads(run(cli, "costs", "import", "--cost-db", c, a, "--json").stdout)
    rows = sqlite_rows(c)
    assert set(own) <= set(rows) and len(rows) == len(own) + merged["added"], merged
    assert {r[0] for r in sqlite_rows(a)} <= {r[0] for r in rows}


def test_a_source_of_another_schema_version_is_refused(cli, pg, tmp_path):
    old = tmp_path / "v2.db"
    con = sqlite3.connect(old)
    con.executescript(
        "CREATE TABLE costs (key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
        " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
        " measured_at TEXT DEFAULT CURRENT_TIMESTAMP, spent_s REAL DEFAULT 0);"
        "INSERT INTO costs (key, backend, hardware, subgraph, cost_ms, ok) VALUES"
        " ('k', 'onednn', 'hw', 'text', 1.0, 1);"
        "PRAGMA user_version = 2;")
    con.close()
    url = pg.create_database("refusing")
    for args in (["costs", "export", "--cost-db", old, url],
                 ["costs", "import", "--cost-db", tmp_path / "new.db", old]):
        proc = run(cli, *args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "records are of schema 2" in proc.stderr, proc.stderr
    con = sqlite3.connect(old)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2  # read, never migrated
    con.close()
    # Refused before the destination was even opened: nothing created there.
    assert pg.psql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'costs'",
                   "refusing").strip() == "0"
    newer = pg.create_database("newer_source")
    pg.psql("CREATE TABLE collage_schema (version integer); INSERT INTO collage_schema VALUES (4)",
            "newer_source")
    proc = run(cli, "costs", "export", "--cost-db", newer, tmp_path / "x.db", check=False)
    assert proc.returncode == 2 and "newer" in proc.stderr, proc.stderr


@pytest.mark.skipif(not os.environ.get("COLLAGE_PYTHONPATH"),
                    reason="the Python module was not built")
def test_python_tune_takes_a_postgresql_url(pg, model, tmp_path):
    url = pg.create_database("python")
    script = ("import collage; p = collage.tune({!r}, backends='onednn', budget=0, cost_db={!r},"
              " threads=1, progress=False, optimizer='op-level'); print(p.tuning.cost_db)"
              .format(model, url))
    env = dict(os.environ, PYTHONPATH=os.environ["COLLAGE_PYTHONPATH"])
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == url
    assert kernel_rows(pg, "python") > 0
