// Assembles one host: the state home, the system calls it grants (`sys.mjs`), process identity,
// the clock and entropy, and two instances of the portable artifact — the one whose imports they
// are (`root`: the component with the store, the workspace and the plugin catalog composed in,
// the Rust protocols the native host runs), and one for pure exports (`pure`:
// `dispositions.judge-owner` for this host's own liveness questions, the §2 parsers), which the
// first may need while one of its import calls runs. The counterpart of the native
// `HostBuilder::build` (`host/src/api/host.rs`) and of the Python `Host`.
import { instantiatePortable, instantiatePure } from './component.mjs';
import { hostImports } from './imports.mjs';
import { Liveness } from './liveness.mjs';
import { ProcessIdentity } from './process-identity/index.mjs';
import { StateHome, selectStateHome } from './state-store/home.mjs';
import { SysFs, sysKernel } from './sys.mjs';
import { Workspace } from './workspace.mjs';
import { createPrivateDir } from './fsops.mjs';

/**
 * Opens the parts of a host: `{home, source, sys, workspace, processes, liveness, root, pure}`.
 * Options: `stateHome` (else the environment's choice, `selectStateHome`), `workspaceRoots` (else
 * the home directory and the temporary directory), `lockTimeoutMs` (how long a wait for another
 * process's kernel lock lasts, default 10 000), `onWarning` (what a long wait says; default
 * `process.emitWarning`), `env`.
 */
export async function assemble({ stateHome, workspaceRoots, pluginCatalog, lockTimeoutMs = 10_000, onWarning, env = process.env } = {}) {
  if (pluginCatalog !== undefined && pluginCatalog !== null) {
    throw new Error(
      'the Node host reads the plugin catalog where ghostget keeps it, <state home>/provider-plugins/catalog.json; ' +
        'another catalog file (`--plugin-catalog`) is an option of the native binary only',
    );
  }
  const selected = selectStateHome(stateHome, env);
  const pure = await instantiatePure();
  const home = StateHome.open(selected.path, env);
  let sys = null;
  try {
    // The native host's own directory, where `doctor` and `recover` tell the user to set files
    // aside (`.proclease/set-aside-…`).
    try {
      createPrivateDir(home.dir, '.proclease');
    } catch {
      // Not needed to work: only the set-aside commands name it.
    }
    const roots = (workspaceRoots && workspaceRoots.length > 0 ? workspaceRoots : Workspace.defaultRoots(env)).map(String);
    const workspace = new Workspace(roots);
    sys = new SysFs(home.path, workspace.rootPaths());
    const processes = new ProcessIdentity(pure, home);
    const liveness = new Liveness(processes, pure);
    const parts = { home, source: selected.source, sys, workspace, processes, liveness, pure, lockTimeoutMs, warn: null };
    parts.warn = onWarning ?? ((message) => process.emitWarning(message, 'ProcleaseWait'));
    const kernel = sysKernel({ lockTimeoutMs: () => parts.lockTimeoutMs, warn: (message) => parts.warn(message) });
    parts.root = guarded(await instantiatePortable({ ...hostImports({ processes }), 'sys-fs': sys.imports(), 'sys-kernel': kernel }), sys);
    return parts;
  } catch (error) {
    sys?.close();
    home.close();
    throw error;
  }
}

/** Whether `f` is a class (jco's exported resources), which is called with `new`, not wrapped. */
const isClass = (f) => /^class[\s{]/.test(Function.prototype.toString.call(f));

/**
 * Whether `error` is what an export returns rather than a trap: jco throws an export's error
 * value as it is (a WIT `error` variant, a `failure` record, a string), and a trap as an `Error`
 * (`WebAssembly.RuntimeError` for a panic, the import's own for an import that failed
 * unexpectedly).
 */
const returned = (error) => !(error instanceof Error);

/**
 * The exports of `root` with each interface function guarded: a call that traps (an exception
 * that is no error value: a panic in the component, a bug of an import) leaves the instance in
 * a state no later call may rely on, and may leave kernel locks held through handles it will
 * never drop. The locks are released at once (`sys.releaseLocks`), as the native host releases
 * what a call left held, so that no other process waits for them; every later call refuses, and
 * the user opens a new `Host` (Python forgets a trapped instance the same way).
 */
function guarded(root, sys) {
  let trapped = null;
  const wrap = (name, f) =>
    function (...args) {
      if (trapped !== null) {
        throw new Error(`a previous call into the proclease component failed unexpectedly (${trapped}); its instance is not used again: open a new Host`);
      }
      try {
        return f.apply(this, args);
      } catch (error) {
        if (!returned(error)) {
          trapped = `${name}: ${error?.message ?? error}`;
          sys.releaseLocks();
        }
        throw error;
      }
    };
  const out = {};
  for (const [iface, members] of Object.entries(root)) {
    if (members === null || typeof members !== 'object') {
      out[iface] = members;
      continue;
    }
    out[iface] = {};
    for (const [name, member] of Object.entries(members)) {
      out[iface][name] = typeof member === 'function' && !isClass(member) ? wrap(`${iface}.${name}`, member) : member;
    }
  }
  return out;
}
