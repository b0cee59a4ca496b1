// Which rules a run applies (engine.cc; the CLI checks --only and --skip with it before any work).
#pragma once

#include <vector>

#include "onnx_rewrite/engine.h"
#include "rules/rule.h"

namespace onnx_rewrite {

// A canonicalization (rules/canonicalize/): a rewrite other rules match better after, never a
// change for its own sake. A run in which only these fire keeps the model as it was, unless --only
// asks for them by id.
bool is_canonicalization(const Rule& rule);

// A simplification (rules/simplify/): a node that computes its input as it is, which --simplify
// removes after the other rules have run (before them it would hide the spellings fusions match).
bool is_simplification(const Rule& rule);

// The active rules for a run: serving the target, filtered by only/skip (unknown ids: UsageError);
// never the simplifications.
std::vector<const Rule*> active_rules(const RuleSet& rules, const RewriteOptions& options);

// The rules of --simplify's run, for every target: the simplifications and (unless
// --no-canonicalize) the canonicalizations, filtered by only/skip.
std::vector<const Rule*> simplification_rules(const RuleSet& rules, const RewriteOptions& options);

}  // namespace onnx_rewrite
