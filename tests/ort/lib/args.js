'use strict';
// Tiny command-line parser shared by the scripts. Unlike util.parseArgs it accepts option
// values that start with a dash (`--float-range -1,1`).

class UsageError extends Error {}

// spec: {name: {type: 'string' | 'number' | 'bool', multiple: bool, default: any}}
function parseArgs(argv, spec) {
  const opts = {};
  const positionals = [];
  for (const [name, s] of Object.entries(spec)) {
    if (s.multiple) opts[name] = [];
    else if (s.default !== undefined) opts[name] = s.default;
    else if (s.type === 'bool') opts[name] = false;
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--') || arg === '--') {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    const s = spec[name];
    if (!s) throw new UsageError(`unknown option --${name}`);
    if (s.type === 'bool') {
      if (eq >= 0) throw new UsageError(`--${name} takes no value`);
      opts[name] = true;
      continue;
    }
    let value;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length) value = argv[++i];
    else throw new UsageError(`--${name} needs a value`);
    if (s.type === 'number') {
      const n = Number(value);
      if (value.trim() === '' || !Number.isFinite(n)) throw new UsageError(`--${name}: '${value}' is not a number`);
      value = n;
    }
    if (s.multiple) opts[name].push(value);
    else opts[name] = value;
  }
  return { opts, positionals };
}

// "lo,hi" -> [lo, hi]
function parseRange(text, what) {
  const parts = String(text).split(',').map((x) => Number(x.trim()));
  if (parts.length !== 2 || parts.some((x) => !Number.isFinite(x)) || parts[0] > parts[1]) {
    throw new UsageError(`${what}: expected 'lo,hi' with lo <= hi, got '${text}'`);
  }
  return parts;
}

// "NAME=value" -> [NAME, value]
function parseAssignment(text, what) {
  const eq = text.lastIndexOf('=');
  if (eq <= 0) throw new UsageError(`${what}: expected NAME=VALUE, got '${text}'`);
  return [text.slice(0, eq), text.slice(eq + 1)];
}

// Runs main() and sets the exit code from its result. A UsageError prints one line
// 'error: ...; usage: ...' and exits 2; so does (with its stack) any unexpected error.
function runMain(usage, main) {
  Promise.resolve()
    .then(main)
    .then((code) => { process.exitCode = code || 0; })
    .catch((err) => {
      if (err instanceof UsageError) {
        process.stderr.write(`error: ${err.message}; ${usage}\n`);
      } else {
        process.stderr.write(`error: ${err && err.stack ? err.stack : err}\n`);
      }
      process.exitCode = 2;
    });
}

module.exports = { parseArgs, parseRange, parseAssignment, runMain, UsageError };
