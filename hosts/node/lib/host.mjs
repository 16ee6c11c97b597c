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
import { SysFs, isClass, operationBound, sysKernel } from './sys.mjs';
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
    const parts = { home, source: selected.source, sys, workspace, processes, liveness, pure, lockTimeoutMs, warn: null, operation: null, asOperation: null };
    parts.warn = onWarning ?? ((message) => process.emitWarning(message, 'ProcleaseWait'));
    // One operation's lock waits share one bound (`sysKernel`, `operationBound`).
    const operation = { depth: 0, deadlineNs: 0n, timedOut: null };
    parts.operation = operation;
    const kernel = sysKernel({ lockTimeoutMs: () => parts.lockTimeoutMs, warn: (message) => parts.warn(message), operation });
    const own = hostImports({ processes });
    const imports = { 'sys-fs': sys.imports(), 'sys-kernel': sys.recorded(kernel) };
    for (const [name, body] of Object.entries(own)) imports[name] = sys.recorded(body);
    parts.asOperation = (call) => operationBound(operation, parts.lockTimeoutMs, call);
    parts.root = guarded(await instantiatePortable(imports), sys, parts.asOperation);
    return parts;
  } catch (error) {
    sys?.close();
    home.close();
    throw error;
  }
}

/** Whether `error` is a trap of the component itself: a `WebAssembly.RuntimeError` raised in a wasm frame. */
const isWasmTrap = (error) =>
  error instanceof WebAssembly.RuntimeError && /^\s*at wasm:\/\//.test(String(error.stack ?? '').split('\n').find((line) => /^\s*at /.test(line)) ?? '');

/**
 * The exports of `root`, every entry into the instance guarded — interface functions, and the
 * methods, static functions and drops of the resources it exports. A call that traps (a panic in
 * the component, or an exception that no error value is, thrown by an import: `sys.importError`)
 * leaves the instance in a state no later call may rely on, and kernel locks held through handles
 * it will never drop. Those handles are closed at once (`sys.releaseAll`), as the native host
 * releases what a call left held, so that no other process waits for them; every later call
 * refuses, and the user opens a new `Host` (Python forgets a trapped instance the same way). An
 * error jco raises before it enters the component (an argument of the wrong type) changes
 * nothing. A closed host refuses every call.
 */
function guarded(root, sys, asOperation = (call) => call()) {
  let trapped = null;
  const enter = (name, call) => {
    if (sys.closed) throw new Error(`${name}: this Host is closed: open a new one`);
    if (trapped !== null) {
      throw new Error(`a previous call into the proclease component failed unexpectedly (${trapped}); its instance is not used again: open a new Host`);
    }
    sys.importError = null;
    try {
      return asOperation(call);
    } catch (error) {
      if (isWasmTrap(error) || sys.importError !== null) {
        trapped = `${name}: ${error?.message ?? error}`;
        sys.releaseAll();
      }
      throw error;
    } finally {
      sys.importError = null;
    }
  };
  const wrap = (name, f) =>
    function (...args) {
      return enter(name, () => f.apply(this, args));
    };
  const wrapResource = (iface, name, Resource) => {
    for (const key of Object.getOwnPropertyNames(Resource.prototype)) {
      const method = Object.getOwnPropertyDescriptor(Resource.prototype, key).value;
      if (key !== 'constructor' && typeof method === 'function') Resource.prototype[key] = wrap(`${iface}.${name}.${key}`, method);
    }
    for (const key of Object.getOwnPropertyNames(Resource)) {
      const member = Object.getOwnPropertyDescriptor(Resource, key).value;
      if (typeof member === 'function' && !isClass(member)) Resource[key] = wrap(`${iface}.${name}.${key}`, member);
    }
    const drop = Resource.prototype[Symbol.dispose];
    if (typeof drop === 'function') {
      // A drop after a trap or a close is not made: the instance is not entered again, and the
      // handles it held were closed already.
      Resource.prototype[Symbol.dispose] = function () {
        if (trapped !== null || sys.closed) return undefined;
        return enter(`${iface}.${name} drop`, () => drop.call(this));
      };
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
      if (isClass(member)) wrapResource(iface, name, member);
      out[iface][name] = typeof member === 'function' && !isClass(member) ? wrap(`${iface}.${name}`, member) : member;
    }
  }
  return out;
}
