// Fault injection for kill tests: the peer stops at a named protocol step so that a test can
// SIGKILL it at that exact instant.
//
//   PEER_PAUSE_AT=<step>[,<step>...]  steps to stop at (names: see README.md, "Pause points")
//   PEER_PAUSE_COUNT=<n>              stop at the n-th time a listed step is reached (default 1)
//   PEER_PAUSE_MS=<ms>                how long to stop (default: until killed)
//
// On stopping, the peer writes one line to stdout, synchronously, before it sleeps:
//   {"event":"paused","step":"<step>","pid":<pid>}

import { writeSync } from "node:fs";
import { sleepSync } from "./identity.mjs";

const steps = new Set(
  (process.env.PEER_PAUSE_AT ?? "")
    .split(",")
    .map((step) => step.trim())
    .filter((step) => step.length > 0),
);
const pauseAtCount = Number.parseInt(process.env.PEER_PAUSE_COUNT ?? "1", 10);
const pauseMs = process.env.PEER_PAUSE_MS === undefined ? Infinity : Number(process.env.PEER_PAUSE_MS);
let reached = 0;

export function pausePoint(step) {
  if (!steps.has(step)) return;
  reached += 1;
  if (reached !== pauseAtCount) return;
  writeSync(1, `${JSON.stringify({ event: "paused", step, pid: process.pid })}\n`);
  if (pauseMs === Infinity) {
    for (;;) sleepSync(60_000);
  }
  sleepSync(pauseMs);
}
