#!/usr/bin/env node
'use strict';
// Counts what the fusions did to a model: nodes (subgraphs included: ORT optimizes If/Loop
// bodies too) and the fused ops the output has beyond the original's. Prints one JSON line
// {file, nodes_before, nodes, fused, made} per model after the first, against the first.

const { parseArgs, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/fused_ops.js ORIGINAL.onnx OPTIMIZED.onnx...';

// The ops a fusion makes: every com.microsoft op (FusedConv, FusedGemm, FusedMatMul, QuickGelu,
// BiasGelu, Skip*LayerNormalization, ...) and the default-domain ones ORT's fusions and ours write.
const STANDARD_FUSED = new Set(['LayerNormalization', 'SimplifiedLayerNormalization', 'RMSNormalization', 'Gelu']);

function opKey(node) {
  return node.domain && node.domain !== 'ai.onnx' ? `${node.domain}.${node.opType}` : node.opType;
}

function isFused(node) {
  return node.domain === 'com.microsoft' || ((!node.domain || node.domain === 'ai.onnx') && STANDARD_FUSED.has(node.opType));
}


function summary(file, readModel) {
  const graph = readModel(file).graph;
  let nodes = 0;
  const fused = {};
  const visit = (g) => {
    for (const n of g.nodes) {
      nodes += 1;
      if (isFused(n)) fused[opKey(n)] = (fused[opKey(n)] || 0) + 1;
      for (const sg of n.subgraphs) visit(sg);
    }
  };
  visit(graph);
  return { file, nodes, fused };
}

async function main() {
  const { positionals } = parseArgs(process.argv.slice(2), {});
  if (positionals.length < 2) throw new UsageError('expected the original model and at least one optimized one');
  const { readModel } = require('../../tools/ort-driver/lib/onnx_model');
  const [original, ...optimized] = positionals.map((f) => summary(f, readModel));
  for (const s of optimized) {
    // Fused ops made: those in the output beyond the ones the original already had.
    const made = {};
    for (const [op, n] of Object.entries(s.fused)) {
      const extra = n - (original.fused[op] || 0);
      if (extra > 0) made[op] = extra;
    }
    const total = Object.values(made).reduce((a, b) => a + b, 0);
    process.stdout.write(`${JSON.stringify({ file: s.file, nodes_before: original.nodes, nodes: s.nodes, fused: total, made })}\n`);
  }
  return 0;
}

runMain(USAGE, main);
