#!/usr/bin/env node
'use strict';
// For each model listed in LIST (one path per line): whether ONNX Runtime (CPU, optimizations
// off) creates a session for it. One JSON line per model: {"model", "loads", "error"}. With
// --optimize-into DIR, also saves ORT's own optimized form (level extended) of each model that
// loads as DIR/<n>.onnx and lists it after the others: ORT's output is part of what it loads.

const fs = require('fs');
const path = require('path');
const { parseArgs, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/load_verdicts.js LIST [--optimize-into DIR]';

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), { 'optimize-into': { type: 'string' } });
  if (positionals.length !== 1) throw new UsageError('expected exactly one LIST file');
  const { createSession } = require('../../tools/ort-driver/lib/ort_session');
  const models = fs.readFileSync(positionals[0], 'utf8').split('\n').filter((line) => line.length > 0);
  const optimized = [];
  const verdict = async (model, options) => {
    try {
      const session = await createSession(model, { threads: 1, ...options });
      await session.release();
      return { model, loads: true, error: '' };
    } catch (err) {
      if (err.kind === 'unsupported') return { model, loads: true, error: '' };
      return { model, loads: false, error: err.message };
    }
  };
  for (const model of models) {
    const result = await verdict(model, { level: 'disabled' });
    process.stdout.write(JSON.stringify(result) + '\n');
    if (opts['optimize-into'] && result.loads) {
      const out = path.join(opts['optimize-into'], `${optimized.length}.onnx`);
      const saved = await verdict(model, { level: 'extended', optimizedModelFilePath: out });
      if (saved.loads && fs.existsSync(out)) optimized.push(out);
    }
  }
  for (const model of optimized) process.stdout.write(JSON.stringify(await verdict(model, { level: 'disabled' })) + '\n');
  return 0;
}

runMain(USAGE, main);
