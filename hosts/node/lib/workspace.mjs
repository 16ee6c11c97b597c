// The granted workspace roots. Everything the host does under them — a directory's facts, private
// creation, the identity-bound removal through the reference's quarantine (§3.3
// removePrivateDirectoryTree), the removal of an empty directory — is the portable artifact's
// `workspace` (the Rust protocol every host runs) over this host's system calls (`sys.mjs`), and
// why a refused directory does not qualify (§6A.4) is its `workspace-advice`.
import * as fs from 'node:fs';
import * as os from 'node:os';
import { WorkspaceError } from './errors.mjs';
import { Dir } from './fsops.mjs';

/** The granted workspace roots. */
export class Workspace {
  /** The roots granted when none is given: the home directory and the temporary directory. */
  static defaultRoots(env = process.env) {
    const roots = [];
    if (env.HOME) roots.push(env.HOME);
    roots.push(os.tmpdir());
    return roots;
  }

  /** Grants `roots` (each resolved with realpath). Throws for a root that does not exist or is not a directory (opened `O_NOFOLLOW` once, as the artifact will). */
  constructor(roots) {
    this.roots = [];
    for (const root of roots) {
      const label = String(root);
      let path;
      try {
        path = fs.realpathSync(label);
      } catch (error) {
        throw WorkspaceError.io(label, 'realpath of a workspace root', error);
      }
      try {
        Dir.open(path).close();
      } catch (error) {
        throw WorkspaceError.io(label, 'open of a workspace root', error);
      }
      this.roots.push(path);
    }
  }

  /** The granted roots, resolved. */
  rootPaths() {
    return [...this.roots];
  }
}
