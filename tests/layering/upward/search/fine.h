// A fixture for the layering check (tests/layering): search may include runtime.
#pragma once
#include "runtime/executor.h"
