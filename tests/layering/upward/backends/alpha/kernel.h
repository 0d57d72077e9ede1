// A fixture for the layering check (tests/layering): a backend must not include another's.
#pragma once
#include "backends/alpha/own.h"
#include "backends/beta/theirs.h"
