// Helpers for the peer's tests: private temporary state homes and peer subprocesses whose JSON
// lines can be awaited (to SIGKILL a peer at the instant it reports a pause point).

import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

export const PEER = fileURLToPath(new URL("./peer.mjs", import.meta.url));

const running = new Set(); // peers not yet reaped

/** SIGKILLs every peer still running and waits until they are reaped. */
export async function killRunningPeers() {
  await Promise.all([...running].map((peer) => peer.kill()));
}

/**
 * A fresh private (0700) temporary directory under PEER_TEST_TMPDIR (default: the OS temp dir),
 * removed after the test. Returns {root, stateHome} with stateHome = root/ghostget-state (not
 * created: the peer claims it). Peers still running when the test ends (a failed assertion
 * before their kill) are SIGKILLed first.
 */
export function temporaryStateHome(t) {
  const base = process.env.PEER_TEST_TMPDIR ?? os.tmpdir();
  const root = fs.mkdtempSync(path.join(base, "ghostget-peer-"));
  fs.chmodSync(root, 0o700);
  t.after(async () => {
    await killRunningPeers();
    fs.rmSync(root, { recursive: true, force: true });
  });
  return { root, stateHome: path.join(root, "ghostget-state") };
}

/** Starts `node peer.mjs ...args` with extra environment. */
export function startPeer(args, env = {}) {
  const child = spawn(process.execPath, [PEER, ...args], {
    env: { ...process.env, PEER_PAUSE_AT: "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines = [];
  const waiters = [];
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  readline.createInterface({ input: child.stdout }).on("line", (text) => {
    const line = JSON.parse(text);
    lines.push(line);
    for (const waiter of [...waiters]) {
      if (waiter.predicate(line)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(line);
      }
    }
  });
  const exited = new Promise((resolve) => {
    child.on("close", (code, signal) => {
      running.delete(peer);
      resolve({ code, signal, lines, stderr, last: lines.at(-1) });
    });
  });
  const peer = {
    child,
    pid: child.pid,
    lines,
    exited,
    /** Resolves with the first line (already printed or future) matching `predicate`. */
    waitFor(predicate, timeoutMs = 20_000) {
      const seen = lines.find(predicate);
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = { predicate, resolve };
        waiters.push(waiter);
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`peer ${child.pid} printed no matching line in ${timeoutMs} ms: ${JSON.stringify(lines)} ${stderr}`));
        }, timeoutMs);
        exited.then(() => {
          if (waiters.includes(waiter)) {
            clearTimeout(timer);
            waiters.splice(waiters.indexOf(waiter), 1);
            reject(new Error(`peer ${child.pid} exited without a matching line: ${JSON.stringify(lines)} ${stderr}`));
          }
        });
        const done = waiter.resolve;
        waiter.resolve = (line) => {
          clearTimeout(timer);
          done(line);
        };
      });
    },
    /** Waits for the peer's pause line at `step`. */
    paused(step) {
      return this.waitFor((line) => line.event === "paused" && line.step === step);
    },
    /** SIGKILLs the peer and waits until it is reaped (no zombie left behind). */
    async kill() {
      child.kill("SIGKILL");
      return exited;
    },
  };
  running.add(peer);
  return peer;
}

/** Runs a peer to completion: {code, signal, lines, last, stderr}. */
export function runPeer(args, env = {}) {
  return startPeer(args, env).exited;
}

/** Names in a directory, sorted, "." entries excluded. */
export function listNames(dir) {
  return fs.readdirSync(dir).sort();
}

/** A pid that named a process which has exited and been reaped. */
export async function deadPid() {
  const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  await new Promise((resolve) => child.on("close", resolve));
  return child.pid;
}
