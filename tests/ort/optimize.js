#!/usr/bin/env node
'use strict';
// Has ONNX Runtime optimize a model at a given level and save the result (session option
// optimizedModelFilePath), reporting the wall time of session creation + save and the peak RSS
// of this process (which includes node and ORT themselves, ~60 MiB).

const fs = require('fs');
const { parseArgs, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/optimize.js IN.onnx OUT.onnx --level basic|extended|all [--json]';
const LEVELS = ['disabled', 'basic', 'extended', 'all'];

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), {
    level: { type: 'string' },
    json: { type: 'bool' },
  });
  if (positionals.length !== 2) throw new UsageError('expected IN.onnx and OUT.onnx');
  if (!opts.level) throw new UsageError('--level is required');
  if (!LEVELS.includes(opts.level)) throw new UsageError(`--level: unknown level '${opts.level}'`);
  const [input, output] = positionals;
  if (!fs.existsSync(input)) throw new UsageError(`no such file: ${input}`);

  const { createSession } = require('../../tools/ort-driver/lib/ort_session');
  const { readModel } = require('../../tools/ort-driver/lib/onnx_model');
  fs.rmSync(output, { force: true }); // so a stale file can't pass for ORT's output

  const t0 = process.hrtime.bigint();
  let session;
  try {
    session = await createSession(input, { level: opts.level, optimizedModelFilePath: output });
  } catch (err) {
    // Creation may fail after the model was saved (node binding dtype limits): still usable.
    if (err.kind !== 'unsupported' || !fs.existsSync(output)) {
      process.stderr.write(`error: ONNX Runtime failed on ${input}: ${err.message}\n`);
      return 1;
    }
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (session) await session.release();
  if (!fs.existsSync(output)) {
    process.stderr.write(`error: ONNX Runtime did not write ${output}\n`);
    return 1;
  }

  const maxRssKb = process.resourceUsage().maxRSS; // kilobytes
  const ops = {};
  for (const n of readModel(output).graph.nodes) {
    const key = n.domain && n.domain !== 'ai.onnx' ? `${n.domain}.${n.opType}` : n.opType;
    ops[key] = (ops[key] || 0) + 1;
  }
  const nodes = Object.values(ops).reduce((a, b) => a + b, 0);
  if (opts.json) {
    process.stdout.write(`${JSON.stringify({ input, output, level: opts.level, ms: Math.round(ms * 10) / 10, max_rss_kb: maxRssKb, nodes, ops })}\n`);
  } else {
    process.stdout.write(`optimized ${input} -> ${output} (level ${opts.level}): ${ms.toFixed(1)} ms, ` +
      `peak RSS ${(maxRssKb / 1024).toFixed(1)} MiB, ${nodes} nodes: ` +
      `${Object.entries(ops).map(([k, v]) => `${k} x${v}`).join(', ')}\n`);
  }
  return 0;
}

runMain(USAGE, main);
