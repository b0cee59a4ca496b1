#!/usr/bin/env node
'use strict';
// The tests a ctest run skipped, and why, from its log (BUILD/Testing/Temporary/LastTest.log):
// GoogleTest's skips ("FILE:LINE: Skipped", the reason, "[  SKIPPED ] NAME"; the node scripts
// word theirs alike) and node:test subtests skipped inside a test that ran ("ok N - NAME # SKIP
// reason"). Grouped by reason, most frequent first. Exit 0; scripts/test.sh prints it after ctest.
//
//   node scripts/test-summary.js LOG

const fs = require('fs');

// [{test, reason}] of one test's record in the log.
function skipsOf(test, output, skippedByCtest) {
  const skips = [];
  const lines = output.split('\n');
  if (skippedByCtest) {
    const at = lines.findIndex((line) => /: Skipped$/.test(line));
    const end = lines.findIndex((line, i) => i > at && line.startsWith('[  SKIPPED ]'));
    const reason = at >= 0 ? lines.slice(at + 1, end < 0 ? undefined : end).join(' ').trim() : '';
    skips.push({ test, reason: reason || '(no reason given)' });
  }
  for (const line of lines) {
    const m = /^\s*ok \d+ - (.*?) # SKIP\s*(.*)$/.exec(line);
    if (m) skips.push({ test: `${test} › ${m[1]}`, reason: m[2] || '(no reason given)' });
  }
  return skips;
}

function main() {
  if (process.argv.length !== 3) {
    process.stderr.write('usage: node scripts/test-summary.js BUILD/Testing/Temporary/LastTest.log\n');
    return 2;
  }
  const log = fs.readFileSync(process.argv[2], 'utf8');
  const records = log.split(/^\d+\/\d+ Testing: /m).slice(1);
  const skips = [];
  for (const record of records) {
    // Value-parameterized tests' names end with their parameter's bytes.
    const test = record.slice(0, record.indexOf('\n')).replace(/  # GetParam\(\) = .*$/, '');
    const output = /\nOutput:\n-+\n([\s\S]*?)<end of output>/.exec(record);
    skips.push(...skipsOf(test, output ? output[1] : '', record.includes('Skip regular expression found in output')));
  }
  const byReason = new Map();
  for (const { test, reason } of skips) byReason.set(reason, [...(byReason.get(reason) || []), test]);
  process.stdout.write(`test summary: ${records.length} tests, ${skips.length} skipped${skips.length ? ':' : ''}\n`);
  for (const [reason, tests] of [...byReason].sort((a, b) => b[1].length - a[1].length)) {
    const shown = tests.slice(0, 4).join(', ') + (tests.length > 4 ? `, and ${tests.length - 4} more` : '');
    process.stdout.write(`  ${tests.length} × ${reason}\n      ${shown}\n`);
  }
  return 0;
}

process.exitCode = main();
