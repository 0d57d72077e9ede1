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
