"""Issue 21 in `make test`: four `collage tune` processes at once on one SQLite cost
database, fresh and existing, with both cores kept busy (see stress.py for what a round
checks). The test that failed on the old code is tests/robustness'
ProcessesOpeningOneFreshFileAtOnceAllKeepIt (the open race, released at one instant); this
one runs the whole CLI: no tune fails, nothing is moved aside, lost or measured twice."""
import os

import stress


def test_four_tuners_at_once_under_load(cli, tmp_path):
    lines = []
    failed = stress.stress(cli, str(tmp_path), rounds=int(os.environ.get("STRESS_ROUNDS", "6")),
                           tuners=4, busy=os.cpu_count(), log=lines.append)
    assert not failed, "\n".join(lines)


def test_distributed_measurement_on_a_sqlite_file(cli, tmp_path):
    """The job queue on the SQLite engine (workers on the same machine as the file): two
    workers measure every key once, the tuner measures nothing itself."""
    import json
    import signal
    import subprocess

    model = tmp_path / "m.onnx"
    subprocess.run([cli, "zoo", stress.MODEL, "-o", model], check=True, capture_output=True)
    db = str(tmp_path / "costs.db")
    subprocess.run([cli, "costs", "stats", "--cost-db", db], check=True, capture_output=True)
    workers = [subprocess.Popen([cli, "measure-worker", "--cost-db", db, "--threads", "1",
                                 "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    tune = subprocess.run(stress.tune_command(cli, str(model), db, str(tmp_path / "p.json"),
                                              stress.MORE_BACKENDS)
                          + ["--distributed", "--claim-timeout", "120"],
                          capture_output=True, text=True)
    reports = []
    for w in workers:
        w.send_signal(signal.SIGTERM)
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        reports.append(json.loads(out))
    assert tune.returncode == 0, tune.stderr
    t = json.loads(tune.stdout)
    rows = stress.kernel_rows(db)
    assert t["measured"] == 0 and t["measured_elsewhere"] == rows, t
    assert sum(r["measured"] for r in reports) == rows, reports


def test_a_locked_database_is_reported_with_its_holder_and_never_moved(cli, tmp_path):
    """Busy is not corrupt: a file another process keeps locked past the busy timeout is an
    error naming that process, and stays as it is; once free, it opens (and migrates)."""
    import sqlite3
    import subprocess
    import sys

    db = tmp_path / "costs.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE costs (key TEXT PRIMARY KEY, backend TEXT NOT NULL, hardware TEXT NOT NULL,"
        " subgraph TEXT NOT NULL, cost_ms REAL, ok INTEGER NOT NULL, reason TEXT,"
        " measured_at TEXT DEFAULT CURRENT_TIMESTAMP, spent_s REAL DEFAULT 0);"
        "PRAGMA user_version = 2;")  # schema 2: opening it must write (migrate)
    con.close()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys, time\n"
         f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
         "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        env = dict(os.environ, COLLAGE_COST_DB_BUSY_TIMEOUT="1")
        proc = subprocess.run([cli, "costs", "stats", "--cost-db", db], capture_output=True,
                              text=True, env=env)
        assert proc.returncode != 0, proc.stdout
        assert f"stayed locked for 1 s by pid {holder.pid} (python3)" in proc.stderr, proc.stderr
        assert "nothing was changed" in proc.stderr
    finally:
        holder.stdin.close()
        holder.wait()
    assert not list(tmp_path.glob("costs.db.unusable-*"))
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2
    con.close()
    again = subprocess.run([cli, "costs", "stats", "--cost-db", db, "--json"],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert '"schema": 3' in again.stdout
