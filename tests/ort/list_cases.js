#!/usr/bin/env node
'use strict';
// Lists the cases of a conformance corpus as a conformance.js JOBS array (original models).

const fs = require('fs');
const path = require('path');
const { parseArgs, runMain, UsageError } = require('./lib/args');

const USAGE = 'usage: node tests/ort/list_cases.js CORPUS_DIR [--match REGEX] [--out JOBS.json]';

// Standard cases are folders holding model.onnx; light/ models are light_X.onnx files with a
// light_X_output_0.pb beside them.
function listCases(dir) {
  const cases = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (fs.existsSync(path.join(p, 'model.onnx'))) cases.push(p);
      else cases.push(...listCases(p));
    } else if (entry.name.endsWith('.onnx') && fs.existsSync(`${p.slice(0, -5)}_output_0.pb`)) {
      cases.push(p);
    }
  }
  return cases;
}

async function main() {
  const { opts, positionals } = parseArgs(process.argv.slice(2), {
    match: { type: 'string' },
    out: { type: 'string' },
  });
  if (positionals.length !== 1) throw new UsageError('expected exactly one CORPUS_DIR');
  const dir = path.resolve(positionals[0]);
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new UsageError(`not a directory: ${dir}`);
  let re = null;
  if (opts.match) {
    try { re = new RegExp(opts.match); } catch (err) { throw new UsageError(`--match: ${err.message}`); }
  }
  const jobs = listCases(dir).filter((c) => !re || re.test(c)).map((c) => ({ case: c }));
  const json = `${JSON.stringify(jobs, null, 1)}\n`;
  if (opts.out) fs.writeFileSync(opts.out, json);
  else process.stdout.write(json);
  return 0;
}

runMain(USAGE, main);
