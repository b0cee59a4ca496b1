// C++ replacements, one file per op family; each family adds its builders to the table.
#pragma once

#include <map>
#include <string>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/matcher.h"

namespace onnx_rewrite {

using BuilderTable = std::map<std::string, BuilderFunction>;

void add_group_norm_builders(BuilderTable& table);   // group_norm.cc
void add_deform_conv_builders(BuilderTable& table);  // deform_conv.cc
void add_contrib_fusion_builders(BuilderTable& table);    // contrib_fusion.cc: patterns -> com.microsoft ops
void add_contrib_defusion_builders(BuilderTable& table);  // contrib_defusion.cc: com.microsoft ops -> standard ops
void add_nchwc_builders(BuilderTable& table);        // nchwc.cc: com.microsoft.nchwc back to NCHW
void add_attention_builders(BuilderTable& table);    // attention_defusion.cc: com.microsoft attention ops

}  // namespace onnx_rewrite
