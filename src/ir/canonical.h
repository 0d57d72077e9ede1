// The canonical text of a subgraph: what a measured cost depends on, and nothing else.
// Value and node names are replaced by positions, so the same layer in two models (or twice
// in one model) gets the same key. Big constants contribute their dtype and shape only
// (timing does not depend on weight values); small ones (shape vectors, scalars such as a
// Clip bound or a Pow exponent) contribute their values, because they change what runs.
#pragma once

#include <string>

#include "collage/graph.h"

namespace collage {

std::string canonical_text(const Graph& subgraph);
// The canonical text a measured cost is keyed by: the canonical text, except that a small
// constant read only as the positions of a Gather, GatherElements or GatherND contributes
// its dtype, shape and signs, not its values. A gather of one position costs what a gather
// of another costs, and an unrolled loop (a traced RNN cell, a selective scan) gathers step t
// in its t-th copy of the same nodes: 64 steps would otherwise be 64 keys, each measured (a
// Mamba-style block's tune measured 25,000 candidates). The signs stay: a negative position
// is read from the end, another path in a kernel. Not for what must tell values apart (the
// reference outputs a candidate is checked against, a model's hash).
std::string cost_text(const Graph& subgraph);
// A short stable digest of a string (FNV-1a 64, hex): for keys and file names.
std::string digest(const std::string& text);
// What `digest` computed until cost-DB schema 3: FNV-1a 64 with an offset basis a digit
// short (1469598103934665603). Only to recognise what was digested with it: old cost-DB
// keys (re-keyed by the schema 3 migration) and old plans' model hashes.
std::string digest_before_schema_3(const std::string& text);

}  // namespace collage
