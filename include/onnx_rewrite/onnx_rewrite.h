// The onnx-rewrite library in one header: load a model, rewrite it with rules for a target,
// check what the target can't load, write it. The CLI (`onnx-rewrite rewrite`) is this, plus
// options and reports.
//
//   #include <onnx_rewrite/onnx_rewrite.h>
//
//   onnx_rewrite::Model model = onnx_rewrite::load_model("in.onnx");      // weights stay in the file
//   onnx_rewrite::RuleSet rules;
//   rules.load_builtin();                                                 // and/or rules.load_path("my.rules")
//   onnx_rewrite::RewriteOptions options;
//   options.target = "onnx";                                              // a built-in target or a .target file
//   options.inline_functions = !onnx_rewrite::find_target(options.target).local_functions;
//   onnx_rewrite::RewriteResult result = onnx_rewrite::rewrite_model(model, rules, options);
//   onnx_rewrite::CheckReport report = onnx_rewrite::check_model(model, onnx_rewrite::find_target(options.target), std::nullopt);
//   onnx_rewrite::write_model(model, "out.onnx");                          // atomic; unchanged bytes copied as they were
//
// Errors in input files are onnx_rewrite::InputError (file and message), impossible requests
// onnx_rewrite::UsageError (error.h). CMake: find_package(onnx_rewrite CONFIG) and link
// onnx_rewrite::onnx_rewrite.
#pragma once

#include "onnx_rewrite/engine.h"    // RewriteOptions, rewrite_model, RewriteResult
#include "onnx_rewrite/error.h"     // InputError, UsageError, exit codes
#include "onnx_rewrite/model.h"     // Model
#include "onnx_rewrite/model_io.h"  // load_model, write_model, serialize_model
#include "onnx_rewrite/rule_set.h"  // RuleSet
#include "onnx_rewrite/target.h"    // find_target, check_model, CheckReport
#include "onnx_rewrite/verify.h"    // input_problem: what ONNX Runtime would refuse before any rewrite
