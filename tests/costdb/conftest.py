# Fixtures for the cost-database tests: the `collage` binary under test (COLLAGE_CLI).
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("COLLAGE_CLI")
    assert path and os.access(path, os.X_OK), "COLLAGE_CLI must name the collage binary"
    return path
