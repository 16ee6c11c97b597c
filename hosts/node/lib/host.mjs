// Assembles one host: the state home, the store, the workspace, process identity, the plugin
// catalog, the clock and entropy, and the two component instances — the one whose imports they
// are (`root`), and one for pure exports (`pure`: `dispositions.judge-owner` for this host's own
// liveness questions, the §2 parsers), which the first may need while one of its import calls
// runs. The counterpart of the native `HostBuilder::build` (`host/src/api/host.rs`).
import { instantiate, instantiatePure } from './component.mjs';
import { hostImports } from './imports.mjs';
import { Liveness } from './liveness.mjs';
import { PluginCatalog } from './plugin-catalog/index.mjs';
import { ProcessIdentity } from './process-identity/index.mjs';
import { StateHome, selectStateHome } from './state-store/home.mjs';
import { StateStore } from './state-store/index.mjs';
import { Workspace } from './workspace.mjs';
import { createPrivateDir } from './fsops.mjs';

/**
 * Opens the parts of a host: `{home, store, workspace, processes, liveness, catalog, root, pure}`.
 * Options: `stateHome` (else the environment's choice, `selectStateHome`), `workspaceRoots` (else
 * the home directory and the temporary directory), `pluginCatalog` (a catalog file), `env`.
 */
export async function assemble({ stateHome, workspaceRoots, pluginCatalog, env = process.env } = {}) {
  const selected = selectStateHome(stateHome, env);
  const pure = await instantiatePure();
  const home = StateHome.open(selected.path, env);
  try {
    // The native host's own directory, where `doctor` and `recover` tell the user to set files
    // aside (`.proclease/set-aside-…`); this host keeps nothing else there.
    try {
      createPrivateDir(home.dir, '.proclease');
    } catch {
      // Not needed to work: only the set-aside commands name it.
    }
    const roots = (workspaceRoots && workspaceRoots.length > 0 ? workspaceRoots : Workspace.defaultRoots(env)).map(String);
    let store;
    const workspace = new Workspace(roots, () => store?.leasing.release());
    const processes = new ProcessIdentity(pure, home);
    const liveness = new Liveness(processes, pure);
    store = new StateStore(home, processes, liveness);
    const catalog = new PluginCatalog(store, processes, liveness, pluginCatalog ?? null);
    const root = await instantiate(hostImports({ store, workspace, processes, catalog }));
    return { home, source: selected.source, store, workspace, processes, liveness, catalog, root, pure };
  } catch (error) {
    home.close();
    throw error;
  }
}
