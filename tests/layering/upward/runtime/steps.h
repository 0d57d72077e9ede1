// A fixture for the layering check (tests/layering): runtime must not include search.
#pragma once
#include "search/tuner.h"
