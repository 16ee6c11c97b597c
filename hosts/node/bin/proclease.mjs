#!/usr/bin/env node
// `proclease` (the Node host): `run`, `doctor`, `recover` — see `lib/cli.mjs`.
import { main } from '../lib/cli.mjs';

// A report's reader that goes away (`doctor | head -1`) ends it quietly.
process.stdout.on('error', (error) => {
  if (error.code === 'EPIPE') process.exit(0);
  throw error;
});

main(process.argv.slice(2)).then(
  (status) => {
    process.exitCode = status;
  },
  (error) => {
    process.stderr.write(`proclease: ${error?.stack ?? error}\n`);
    process.exitCode = 1;
  },
);
