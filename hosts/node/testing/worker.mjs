// A child process of the interop tests (tests/tests/mixed_hosts.rs), the Node host's side of
// `store_worker` / `admission_worker` (tests/src/bin/), with the same arguments and output:
//
//   worker.mjs increment <state-home> <path> <count>
//     count times: read {"value":N} (absent: create {"value":0}), replace it if unchanged with
//     N+1, retrying lost compare-and-swaps; prints {"event":"ready"} before the first, then
//     {"outcome":"done","successes":S,"retries":R,"value":V}
//   worker.mjs race <state-home> <go-file> <release-file>
//     waits for <go-file>, acquires the export admission: prints `acquired`, waits for
//     <release-file> and releases it; or prints `blocked: <message>`
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';

import { isTransient } from './transient.mjs';
import { Host } from '../lib/index.mjs';

const [mode, home, ...rest] = process.argv.slice(2);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(path) {
  const deadline = Date.now() + 60_000;
  while (!existsSync(path)) {
    if (Date.now() > deadline) throw new Error(`${path} never appeared`);
    await sleep(1);
  }
}

async function increment(path, count) {
  const host = await Host.open({ stateHome: home });
  // The artifact's own `state-store` export: the Rust store every host runs.
  const store = host.exports.stateStore;
  console.log(JSON.stringify({ event: 'ready' }));
  let successes = 0;
  let retries = 0;
  let value = 0;
  // Bounded: a writer that cannot make progress fails instead of hanging its test.
  const deadline = Date.now() + 300_000;
  while (successes < count) {
    if (Date.now() > deadline) throw new Error(`no progress: ${successes} of ${count} increments in 300 s (${retries} retries)`);
    let replaced;
    let n;
    try {
      const text = store.readIfPresent(path, 1 << 16).text ?? null;
      if (text === null) {
        store.createIfAbsent(path, '{"value":0}\n');
        continue;
      }
      n = JSON.parse(text).value;
      replaced = store.replaceIfUnchanged(path, createHash('sha256').update(text).digest('hex'), `{"value":${n + 1}}\n`);
    } catch (error) {
      if (isTransient(error)) {
        retries += 1;
        continue;
      }
      throw error;
    }
    if (replaced) {
      successes += 1;
      value = n + 1;
    } else {
      retries += 1;
    }
  }
  console.log(JSON.stringify({ outcome: 'done', successes, retries, value }));
}

async function race(go, release) {
  const host = await Host.open({ stateHome: home });
  await waitFor(go);
  try {
    await host.withAdmission(async () => {
      console.log('acquired');
      await waitFor(release);
    });
  } catch (error) {
    console.log(`blocked: ${error.message}`);
  }
}

if (mode === 'increment' && rest.length === 2) await increment(rest[0], Number(rest[1]));
else if (mode === 'race' && rest.length === 2) await race(rest[0], rest[1]);
else {
  console.error(`worker.mjs: usage: see the header; got ${process.argv.slice(2).join(' ')}`);
  process.exit(3);
}
