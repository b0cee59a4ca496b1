'use strict';
// The data sets scripts/fetch-test-data.sh fetches into the build tree's test-data/ ($BUILD_DIR,
// default <repo>/build), found as the C++ tests find them (tests/support/test_support.h).

const fs = require('fs');
const path = require('path');

const ROOT = path.resolve(__dirname, '..', '..', '..');

// {dir} when the set is there; else {dir, missing: why and how to get it, optedOut: whether
// ONNX_REWRITE_SKIP_DATA lists it (the tests that need it are then skipped, not failed)}.
function testData(set) {
  const root = path.join(process.env.BUILD_DIR || path.join(ROOT, 'build'), 'test-data');
  const dir = path.join(root, set);
  // The stamp is written once the set is whole: a fetch cut short leaves none.
  const found = fs.statSync(dir, { throwIfNoEntry: false });
  if (found && found.isDirectory() && fs.existsSync(path.join(root, `${set}.stamp`))) return { dir };
  const optedOut = (process.env.ONNX_REWRITE_SKIP_DATA || '').split(',').includes(set);
  const missing = optedOut ? `test data set '${set}' is missing, and ONNX_REWRITE_SKIP_DATA leaves it out`
    : `test data set '${set}' is missing (no ${dir}): run scripts/fetch-test-data.sh ${set} ` +
      `(or set ONNX_REWRITE_SKIP_DATA=${set} to skip the tests that need it)`;
  return { dir, missing, optedOut };
}

module.exports = { testData };
