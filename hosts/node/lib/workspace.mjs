// What `run` and its messages ask of the directories under the granted workspace roots, read-only
// (the `kind`, `is_empty_directory` and `why_not_physical` helpers of the native
// `guest/protocols/src/workspace/paths.rs`): what a path is, whether a directory is empty, and
// which §6A.4 condition a refused directory misses. Walked component by component from each
// root's descriptor without following a symbolic link (`fsops.mjs`: descriptor-relative through
// `/proc/self/fd`).
//
// Everything that changes the workspace — the identity-bound removal through the reference's
// quarantine (§3.3 removePrivateDirectoryTree), private creation, the removal of an empty
// directory — is the portable artifact's `workspace` (the Rust protocol every host runs), over
// this host's system calls (`sys.mjs`).
import * as fs from 'node:fs';
import * as os from 'node:os';
import { WorkspaceError } from './errors.mjs';
import { Dir, S_IFDIR, S_IFLNK, euid, fileKind, lstat, openDir, using } from './fsops.mjs';
import { birthTimesAreReal } from './sys.mjs';

/** The longest path a directory lease may record, in UTF-16 code units (§6A.3). */
const MAX_PATH_UTF16 = 4096;

/** `directory_lease::is_bounded_path`: absolute, normalised (no trailing `/`, `//`, `.`, `..`), ≤ 4096 UTF-16 units, no NUL/CR/LF. */
export function isBoundedPath(path) {
  const normalised = path === '/' || (path.startsWith('/') && !path.endsWith('/') && path.slice(1).split('/').every((s) => s !== '' && s !== '.' && s !== '..'));
  return normalised && path.length <= MAX_PATH_UTF16 && !/[\0\r\n]/.test(path);
}

/** The physical identity (§6A.4) of a BigInt stat: decimal strings; birth time `"0"` when none (`birthTimesAreReal`). */
export const identityOf = (stat) => ({ device: String(stat.dev), inode: String(stat.ino), birthtimeNs: String(birthTimesAreReal() ? (stat.birthtimeNs ?? 0n) : 0n) });

function facts(stat, canonical) {
  const mode = Number(stat.mode);
  return { canonical, isDirectory: fileKind(mode) === S_IFDIR, owned: Number(stat.uid) === euid(), mode: mode & 0o7777, identity: identityOf(stat) };
}

const notPhysical = () => ({ canonical: false, isDirectory: false, owned: false, mode: 0, identity: { device: '0', inode: '0', birthtimeNs: '0' } });

/** `lstat` through a directory, `null` when absent, a workspace I/O failure otherwise. */
function statAt(dir, name, path, operation = 'statx') {
  try {
    return lstat(dir, name);
  } catch (error) {
    throw WorkspaceError.io(path, operation, error);
  }
}

/**
 * Opens `components` below `root`, one at a time, never following a symbolic link:
 * `{dir}`, `{absent}`, `{notPhysical}` (a component is a link or not a directory) or `{failed: error}`.
 */
function walk(root, components) {
  let current;
  try {
    current = root.dup();
  } catch (error) {
    return { failed: error };
  }
  for (const component of components) {
    let next;
    try {
      next = openDir(current, component);
    } catch (error) {
      current.close();
      if (error.code === 'ENOENT') return { absent: true };
      if (error.code === 'ELOOP' || error.code === 'ENOTDIR') return { notPhysical: true };
      return { failed: error };
    }
    current.close();
    current = next;
  }
  return { dir: current };
}

/** The granted workspace roots. */
export class Workspace {
  /** The roots granted when none is given: the home directory and the temporary directory. */
  static defaultRoots(env = process.env) {
    const roots = [];
    if (env.HOME) roots.push(env.HOME);
    roots.push(os.tmpdir());
    return roots;
  }

  /** Grants `roots` (each resolved with realpath and opened `O_NOFOLLOW`). Throws for a root that does not exist or is not a directory. */
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
      let dir;
      try {
        dir = Dir.open(path);
      } catch (error) {
        throw WorkspaceError.io(label, 'open of a workspace root', error);
      }
      this.roots.push({ path, dir });
    }
  }

  close() {
    for (const root of this.roots) root.dir.close();
  }

  /** The granted roots, resolved. */
  rootPaths() {
    return this.roots.map((r) => r.path);
  }

  /** The granted root `path` lies in, and the components below it. `allowRoot` lets `path` be the root itself. */
  locate(path, allowRoot) {
    if (!isBoundedPath(path)) throw WorkspaceError.refused(path, 'not an absolute, normalised path (no trailing /, //, . or ..)');
    for (const root of this.roots) {
      let rest;
      if (path === root.path) rest = [];
      else if (root.path === '/') rest = path.slice(1).split('/');
      else if (path.startsWith(`${root.path}/`)) rest = path.slice(root.path.length + 1).split('/');
      else continue;
      if (rest.length === 0 && !allowRoot) continue;
      return [root, rest];
    }
    const roots = this.roots.map((r) => r.path).join(', ');
    throw WorkspaceError.refused(
      path,
      `outside the granted workspace roots (${roots}); grant its parent (\`--workspace-root DIR\` on the command line, \`Host.open({workspaceRoots})\` in the library)`,
    );
  }

  /** The facts of the directory at `path`; null when it (or an ancestor below the root) does not exist. */
  inspect(path) {
    const [root, rest] = this.locate(path, true);
    if (rest.length === 0) {
      try {
        return facts(root.dir.stat(), true);
      } catch (error) {
        throw WorkspaceError.io(path, 'statx', error);
      }
    }
    const name = rest[rest.length - 1];
    const walked = walk(root.dir, rest.slice(0, -1));
    if (walked.absent) return null;
    if (walked.notPhysical) return notPhysical();
    if (walked.failed) throw WorkspaceError.io(path, 'open of an ancestor', walked.failed);
    return using(walked.dir, (parent) => {
      const stat = statAt(parent, name, path);
      return stat === null ? null : facts(stat, fileKind(stat.mode) !== S_IFLNK);
    });
  }

  /** What is at `path`, never following a symbolic link (`paths.rs` `kind`): `absent`, `directory`, `symbolic-link`, `other`, `unreachable`. */
  kind(path) {
    const [root, rest] = this.locate(path, true);
    if (rest.length === 0) return 'directory';
    const walked = walk(root.dir, rest.slice(0, -1));
    if (walked.absent) return 'absent';
    if (walked.notPhysical) return 'unreachable';
    if (walked.failed) throw WorkspaceError.io(path, 'open of an ancestor', walked.failed);
    return using(walked.dir, (parent) => {
      const stat = statAt(parent, rest[rest.length - 1], path);
      if (stat === null) return 'absent';
      const kind = fileKind(stat.mode);
      return kind === S_IFDIR ? 'directory' : kind === S_IFLNK ? 'symbolic-link' : 'other';
    });
  }

  /**
   * Which of the §6A.4 conditions `dir` or its parent misses, when a lease of `dir` was refused
   * with `… is not an owned physical directory` (`paths.rs` `why_not_physical`).
   */
  whyNotPhysical(dir) {
    const me = euid();
    const parentOf = (p) => (p.lastIndexOf('/') <= 0 ? '/' : p.slice(0, p.lastIndexOf('/')));
    const quiet = (f) => {
      try {
        return f();
      } catch {
        return null;
      }
    };
    if (dir !== '/') {
      const parent = parentOf(dir);
      const facts = quiet(() => this.inspect(parent));
      if (facts && facts.isDirectory && (!facts.owned || (facts.mode & 0o022) !== 0)) {
        return (
          `its parent ${parent} must be a directory you own that group and others cannot write; a shared directory ` +
          'such as /tmp cannot hold leased directories: use a private one, e.g. mkdir -m 700 /tmp/$USER-jobs'
        );
      }
    }
    const ancestors = [];
    for (let p = dir; ; p = parentOf(p)) {
      ancestors.unshift(p);
      if (p === '/') break;
    }
    for (const ancestor of ancestors.slice(1)) {
      const kind = quiet(() => this.kind(ancestor));
      if (kind === 'symbolic-link') return `${ancestor} is a symbolic link: a leased directory must be reached without symbolic links; give the real path`;
      if (kind === 'other') return `${ancestor} is not a directory`;
    }
    const facts = quiet(() => this.inspect(dir));
    if (!facts || !facts.isDirectory) return `${dir} must be a real directory you own with mode 0700`;
    if (!facts.owned) {
      const uid = quiet(() => {
        const [root, rest] = this.locate(dir, true);
        if (rest.length === 0) return Number(root.dir.stat().uid);
        const walked = walk(root.dir, rest.slice(0, -1));
        if (!walked.dir) return null;
        return using(walked.dir, (parent) => Number(lstat(parent, rest[rest.length - 1])?.uid));
      });
      const owner = Number.isInteger(uid) ? `uid ${uid}` : 'another user';
      return `${dir} belongs to ${owner}, not to you (uid ${me}): lease a directory you own`;
    }
    if (facts.mode !== 0o700) return `${dir} has mode ${facts.mode.toString(8).padStart(4, '0')}; a leased directory must have mode 0700: chmod 700 ${dir}`;
    // A directory identity includes its birth time; without it no lease can prove later that the
    // directory is the one it leased.
    if (facts.identity.birthtimeNs === '0') {
      return (
        `the filesystem holding ${dir} does not record birth times (statx btime), which a lease needs to prove the directory ` +
        'is the one it leased: use a directory on ext4, xfs, btrfs or tmpfs'
      );
    }
    return `${dir} must be a real directory you own with mode 0700, reached without symbolic links`;
  }
}
