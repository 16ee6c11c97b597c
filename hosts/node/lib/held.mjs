// What this process still holds when it ends without reaching a `finally`: `process.exit()`
// inside a callback, a promise nobody awaited when the event loop drains, or SIGINT / SIGTERM /
// SIGHUP with no handler of the program's own. Node runs no `finally` then, and the lease a
// callback held would stay for `recover` to judge — and `recover` deletes the directory of a
// dead owner's lease, results included.
//
// While anything is held, this module listens for `exit` and for those signals, and lets go of
// each held claim as its handle's drop would in the native host (`host/src/api/directory_lease.rs`,
// `admission.rs`): a directory lease in which no command can run (`preparing`, `settled`) and a
// `parent-owned` admission are released; one whose command or helper may run is left, for
// recovery to judge by its witnesses once it is gone. A signal is then raised again with its
// default action, so the process ends as it would have. A program with its own listener for a
// signal keeps it: the signal is its to handle, and only `exit` lets go.

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'];
const held = new Set();
let listening = false;

function letGoOfAll() {
  for (const entry of [...held]) {
    held.delete(entry);
    try {
      entry.letGo();
    } catch {
      // Left as it is: recovery judges it once this process is gone.
    }
  }
}

function onExit() {
  letGoOfAll();
}

function onSignal(signal) {
  // Only this module listens: without it Node would end the process with the signal's
  // default action. Let go, stop listening, and raise it again.
  if (process.listenerCount(signal) > 1) return;
  letGoOfAll();
  stopListening();
  process.kill(process.pid, signal);
}

const signalListeners = new Map(SIGNALS.map((signal) => [signal, () => onSignal(signal)]));

function startListening() {
  if (listening) return;
  listening = true;
  process.on('exit', onExit);
  for (const [signal, listener] of signalListeners) process.on(signal, listener);
}

function stopListening() {
  if (!listening) return;
  listening = false;
  process.off('exit', onExit);
  for (const [signal, listener] of signalListeners) process.off(signal, listener);
}

/**
 * Holds `letGo` (a function that lets go of one claim, synchronously) until the returned
 * function is called; calls it if the process ends first (`exit`, or a signal it has no
 * handler for).
 */
export function hold(letGo) {
  const entry = { letGo };
  held.add(entry);
  startListening();
  return () => {
    held.delete(entry);
    if (held.size === 0) stopListening();
  };
}
