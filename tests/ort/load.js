#!/usr/bin/env node
'use strict';
// Exit 0 if ONNX Runtime (CPU) creates a session for the model; otherwise print ORT's error on
// one line and exit 1. Exit 2 on usage errors.

const fs = require('fs');
const { parseArgs, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/load.js MODEL.onnx [--level disabled|basic|extended|all]';

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), { level: { type: 'string', default: 'all' } });
  if (positionals.length !== 1) throw new UsageError('expected exactly one MODEL.onnx');
  if (!['disabled', 'basic', 'extended', 'all'].includes(opts.level)) throw new UsageError(`--level: unknown level '${opts.level}'`);
  const [model] = positionals;
  if (!fs.existsSync(model)) throw new UsageError(`no such file: ${model}`);

  const { createSession } = require('../../tools/ort-driver/lib/ort_session');
  try {
    const session = await createSession(model, { level: opts.level });
    process.stdout.write(`ok: ${model} (inputs: ${session.inputNames.join(', ') || 'none'}; ` +
      `outputs: ${session.outputNames.join(', ')})\n`);
    await session.release();
    return 0;
  } catch (err) {
    if (err.kind === 'unsupported') {
      // ORT accepted the model; only the node binding can't expose some of its values.
      process.stdout.write(`ok: ${model}\n`);
      process.stderr.write(`note: ${err.message}\n`);
      return 0;
    }
    process.stdout.write(`${err.message}\n`);
    return 1;
  }
}

runMain(USAGE, main);
