// The harness of the SDK tests (test/bats/serve.bats, the files tests, bench/serve):
// loads the unmodified npm `e2b` from $E2B_SDK (a node_modules directory that
// test/serve/npm-install filled) and runs a scenario. The SDK is configured only
// through its documented environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY.
import { createRequire } from 'node:module';
import path from 'node:path';

const dir = process.env.E2B_SDK;
if (!dir) throw new Error('E2B_SDK must name the node_modules directory holding e2b');
const require = createRequire(path.join(dir, 'x.js'));
export const e2b = require('e2b');
export const { Sandbox, CommandExitError, TimeoutError, AuthenticationError, NotFoundError,
  SandboxError } = e2b;
export const version = require('e2b/package.json').version;

export function assert(cond, what) {
  if (!cond) throw new Error('assertion failed: ' + what);
}

export function eq(a, b, what) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`${what}: got ${sa}, want ${sb}`);
}

// Expects FN to throw an error of class CLS (by name: the SDK's classes).
export async function rejects(fn, cls, what) {
  try {
    await fn();
  } catch (e) {
    if (cls && !(e instanceof cls) && e.name !== cls.name)
      throw new Error(`${what}: threw ${e.name}: ${e.message}, want ${cls.name}`);
    return e;
  }
  throw new Error(`${what}: did not throw`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Runs FN; prints "ok" and exits 0, or the error and exits 1. Sandboxes in
// CLEANUP (added by the scenario) are killed either way.
export const cleanup = [];
export async function main(fn) {
  let code = 0;
  try {
    await fn();
    console.log('ok');
  } catch (e) {
    console.error('FAILED:', e && e.stack ? e.stack : e);
    code = 1;
  }
  for (const s of cleanup) {
    try { await s.kill(); } catch {}
  }
  process.exit(code);
}

export const TEMPLATE = process.env.E2B_TEMPLATE || 'base';
