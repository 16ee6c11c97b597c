// Directories under the workspace roots the user granted (`workspace` import; spec §6A.4 and
// §3.3 `removePrivateDirectoryTree`). Port of `host/src/imports/workspace/mod.rs` (and the
// `kind` / `is_empty_directory` helpers of `paths.rs` that `run` uses).
//
// Every primitive is confined to the granted roots (realpath'd and opened once, `O_NOFOLLOW`) and
// walks a path component by component from its root's descriptor without following a symbolic
// link (`fsops.mjs`: descriptor-relative through `/proc/self/fd`):
// * `inspect` reports the physical facts of a directory (`lstat` with BigInt fields: device,
//   inode, birth time in ns — `"0"` when the filesystem gives none —, owner, mode; whether the
//   path is physical). The lease rules over those facts are the component's.
// * `removeTree` removes a directory tree only while it still has the expected (device, inode,
//   birth time): it renames the target to the reference's quarantine name
//   `.io-remove-<pid>-<uuid>.quarantine` in its parent, re-verifies, and deletes descriptor-
//   relative, never following a symbolic link and never crossing into another filesystem. An
//   interrupted quarantine of the same identity is completed only when its remover is provably
//   dead (`kill` → ESRCH), or is this process and no removal of it is running.
//   Unlike the native host, this host cannot take the parent's `flock` around the renames and
//   the scan for quarantines (Node has none): a scan racing another process's rename may see
//   neither the target nor its quarantine and report that nothing was left.
// * `createPrivateDirectory`, `removeEmptyDirectory`: `mkdir` 0700 / `rmdir`, walked the same way.
import * as fs from 'node:fs';
import * as os from 'node:os';
import { WorkspaceError, osError } from './errors.mjs';
import { Dir, S_IFDIR, S_IFLNK, euid, fileKind, fsyncDir, lstat, nameText, namesWhere, openDir, someNames, using, uuid } from './fsops.mjs';
import { isUuidV4 } from './state-store/path.mjs';

/** The most entries a quarantine scan of a parent directory looks at (§3.3). */
export const MAX_SCAN_ENTRIES = 100_000;
/** The most entries one removal deletes before it gives up (a tree still growing under it). */
export const MAX_REMOVAL_ENTRIES = 10_000_000;
/** The longest path a directory lease may record, in UTF-16 code units (§6A.3). */
const MAX_PATH_UTF16 = 4096;
/** How deep a deletion descends while holding directory descriptors (deeper subtrees are moved up first). */
const MAX_OPEN_DEPTH = 64;
/** How many names a deletion reads from a directory at a time. */
const NAMES_PER_READ = 4096;

/** `directory_lease::is_bounded_path`: absolute, normalised (no trailing `/`, `//`, `.`, `..`), ≤ 4096 UTF-16 units, no NUL/CR/LF. */
export function isBoundedPath(path) {
  const normalised = path === '/' || (path.startsWith('/') && !path.endsWith('/') && path.slice(1).split('/').every((s) => s !== '' && s !== '.' && s !== '..'));
  return normalised && path.length <= MAX_PATH_UTF16 && !/[\0\r\n]/.test(path);
}

/** The physical identity (§6A.4) of a BigInt stat: decimal strings; birth time `"0"` when none. */
export const identityOf = (stat) => ({ device: String(stat.dev), inode: String(stat.ino), birthtimeNs: String(stat.birthtimeNs ?? 0n) });

const sameIdentity = (a, b) => a.device === b.device && a.inode === b.inode && a.birthtimeNs === b.birthtimeNs;

function facts(stat, canonical) {
  const mode = Number(stat.mode);
  return { canonical, isDirectory: fileKind(mode) === S_IFDIR, owned: Number(stat.uid) === euid(), mode: mode & 0o7777, identity: identityOf(stat) };
}

const notPhysical = () => ({ canonical: false, isDirectory: false, owned: false, mode: 0, identity: { device: '0', inode: '0', birthtimeNs: '0' } });

const isPrivateOwnedDir = (stat) => fileKind(stat.mode) === S_IFDIR && Number(stat.uid) === euid() && (Number(stat.mode) & 0o777) === 0o700;

/** `^\.io-remove-([1-9][0-9]{0,9})-<uuid v4>\.quarantine$` → the remover's pid. */
export function quarantinePid(name) {
  const match = /^\.io-remove-([1-9][0-9]{0,9})-(.*)\.quarantine$/.exec(name);
  return match && isUuidV4(match[2]) ? Number(match[1]) : null;
}

/** The kernel says no such process (`kill(pid, 0)` → `ESRCH`). Anything else is not proof. */
function definitelyDead(pid) {
  if (pid > 2147483647) return true;
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return error.code === 'ESRCH';
  }
}

/** The quarantines this process is deleting right now (names carry a fresh UUID: a name alone identifies one). */
const REMOVING = new Set();

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

/**
 * Deletes the tree `name` in `parent` (a quarantine the caller identified), descriptor-relative
 * and iteratively (`delete_tree`): directories are opened `O_NOFOLLOW` (a directory swapped for a
 * symbolic link is unlinked as a link, its target untouched), names are raw bytes, a directory on
 * another device (a mount point) is refused (`EXDEV`), and at most `MAX_OPEN_DEPTH` descriptors
 * are open at once (deeper subtrees are first moved up into the quarantine root).
 */
function deleteTree(parent, name, device, budget) {
  const root = openDir(parent, name);
  const stack = [root];
  let flattened = 0;
  try {
    if (root.stat().dev !== device) throw osError('EXDEV');
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      const names = someNames(top, NAMES_PER_READ);
      if (names.length === 0) {
        stack.pop().close();
        continue;
      }
      for (const raw of names) {
        if (--budget.left < 0) throw osError('ENOSPC');
        let stat;
        try {
          stat = fs.lstatSync(top.at(raw), { bigint: true });
        } catch (error) {
          if (error.code === 'ENOENT') continue;
          throw error;
        }
        // A mount point (lstat sees the mounted root): never touch another filesystem.
        if (fileKind(stat.mode) === S_IFDIR && stat.dev !== device) throw osError('EXDEV');
        if (fileKind(stat.mode) !== S_IFDIR) {
          try {
            fs.unlinkSync(top.at(raw));
            continue;
          } catch (error) {
            if (error.code === 'ENOENT') continue;
            if (error.code !== 'EISDIR') throw error; // swapped for a directory: handled below
          }
        }
        // A directory: remove it if empty, else descend (or flatten when too deep).
        try {
          fs.rmdirSync(top.at(raw));
          continue;
        } catch (error) {
          if (error.code === 'ENOENT') continue;
          if (error.code === 'ENOTDIR') {
            fs.unlinkSync(top.at(raw));
            continue;
          }
          if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
        }
        if (stack.length >= MAX_OPEN_DEPTH) {
          flattened += 1;
          fs.renameSync(top.at(raw), stack[0].at(`.proclease-flat-${flattened}-${uuid()}`));
          continue;
        }
        let child;
        try {
          child = openDir(top, raw);
        } catch (error) {
          // Swapped for a symbolic link or a file since the lstat: unlink that instead.
          if (error.code === 'ELOOP' || error.code === 'ENOTDIR') {
            fs.unlinkSync(top.at(raw));
            continue;
          }
          if (error.code === 'ENOENT') continue;
          throw error;
        }
        if (child.stat().dev !== device) {
          child.close();
          throw osError('EXDEV');
        }
        stack.push(child);
        break;
      }
    }
  } finally {
    for (const dir of stack) dir.close();
  }
  // Every file below is gone; remove the emptied directories bottom-up.
  removeEmptied(parent, name, budget);
}

/** Removes the (now file-free) directory tree `name` in `parent`: `rmdir` bottom-up, iteratively. */
function removeEmptied(parent, name, budget) {
  for (;;) {
    try {
      fs.rmdirSync(parent.at(name));
      return;
    } catch (error) {
      if (error.code === 'ENOENT') return;
      if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
    }
    // Descend to a leaf directory and remove it; repeat from the top.
    const stack = [openDir(parent, name)];
    try {
      for (;;) {
        const top = stack[stack.length - 1];
        const [raw] = someNames(top, 1);
        if (raw === undefined) break;
        if (--budget.left < 0) throw osError('ENOSPC');
        try {
          fs.rmdirSync(top.at(raw));
          continue;
        } catch (error) {
          if (error.code === 'ENOENT') continue;
          if (error.code === 'ENOTDIR') {
            fs.unlinkSync(top.at(raw));
            continue;
          }
          if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
        }
        if (stack.length < MAX_OPEN_DEPTH) stack.push(openDir(top, raw));
        else fs.renameSync(top.at(raw), stack[0].at(`.proclease-flat-${uuid()}`));
      }
    } finally {
      for (const dir of stack) dir.close();
    }
  }
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
  /**
   * @param roots the granted roots (paths)
   * @param outOfItsPath called once a tree being removed is renamed to its quarantine: the host
   *   releases the lease-creation lock a recovery holds there (the native `WorkspaceProtocol::new`)
   */
  constructor(roots, outOfItsPath = () => {}) {
    this.outOfItsPath = outOfItsPath;
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

  /** Whether the directory `path` has no entries (true when it is absent). */
  isEmptyDirectory(path) {
    const [root, rest] = this.locate(path, true);
    const walked = walk(root.dir, rest);
    if (walked.absent) return true;
    if (walked.notPhysical) {
      throw WorkspaceError.refused(path, 'a path component (a directory on the way, or the directory itself) is a symbolic link or not a directory');
    }
    if (walked.failed) throw WorkspaceError.io(path, 'open', walked.failed);
    return using(walked.dir, (dir) => {
      try {
        return someNames(dir, 1).length === 0;
      } catch (error) {
        throw WorkspaceError.io(path, 'list', error);
      }
    });
  }

  /**
   * Creates the directory `path` (mode 0700) and any missing ancestors below its granted root,
   * walking from the root without following a symbolic link; returns the directories it created,
   * outermost first (empty when `path` already existed).
   */
  createPrivateDirectory(path) {
    const [root, rest] = this.locate(path, false);
    let current;
    try {
      current = root.dir.dup();
    } catch (error) {
      throw WorkspaceError.io(path, 'dup', error);
    }
    const created = [];
    let walked = root.path;
    try {
      for (const component of rest) {
        walked = walked === '/' ? `/${component}` : `${walked}/${component}`;
        const here = walked;
        let made = false;
        try {
          fs.mkdirSync(current.at(component), { mode: 0o700 });
          created.push(here);
          made = true;
        } catch (error) {
          if (error.code !== 'EEXIST') throw WorkspaceError.io(here, 'mkdir', error);
        }
        let next;
        try {
          next = openDir(current, component);
        } catch (error) {
          if (error.code === 'ELOOP') throw WorkspaceError.refused(here, 'is a symbolic link; give the real path');
          if (error.code === 'ENOTDIR') throw WorkspaceError.refused(here, 'is not a directory');
          throw WorkspaceError.io(here, 'open', error);
        }
        current.close();
        current = next;
        if (made) {
          try {
            fs.fchmodSync(current.fd, 0o700);
          } catch (error) {
            throw WorkspaceError.io(here, 'chmod', error);
          }
        }
      }
    } finally {
      current.close();
    }
    return created;
  }

  /**
   * Removes the directory `path` if it is empty and, when `expected` is given, still that
   * directory (`rmdir` through its granted root); false when it is absent, another directory, or
   * not empty.
   */
  removeEmptyDirectory(path, expected) {
    const [root, rest] = this.locate(path, false);
    if (rest.length === 0) return false;
    const walked = walk(root.dir, rest.slice(0, -1));
    if (!walked.dir) return false;
    return using(walked.dir, (parent) => {
      const name = rest[rest.length - 1];
      const stat = statAt(parent, name, path);
      if (stat === null) return false;
      if (fileKind(stat.mode) !== S_IFDIR || (expected && !sameIdentity(identityOf(stat), expected))) return false;
      try {
        fs.rmdirSync(parent.at(name));
        return true;
      } catch (error) {
        if (error.code === 'ENOENT' || error.code === 'ENOTEMPTY' || error.code === 'EEXIST') return false;
        throw WorkspaceError.io(path, 'rmdir', error);
      }
    });
  }

  /**
   * Removes the directory tree at `path` only while it is still `expected`; completes an
   * interrupted quarantine of `expected` whose remover is provably dead. True when a tree was
   * removed, false when neither the target nor a quarantine of it exists. Errors carry the
   * reference's messages (kind `identity-changed`).
   */
  removeTree(path, expected) {
    if (path.split('/').filter((s) => s !== '').length < 2) throw WorkspaceError.identityChanged(path, 'private recursive removal target is too broad');
    const [root, rest] = this.locate(path, false);
    if (rest.length === 0) throw WorkspaceError.identityChanged(path, 'private recursive removal target is too broad');
    const name = rest[rest.length - 1];
    const walked = walk(root.dir, rest.slice(0, -1));
    if (walked.absent) throw WorkspaceError.identityChanged(path, 'recursive removal parent is absent for an identity-bound target');
    if (walked.notPhysical) throw WorkspaceError.identityChanged(path, 'directory path no longer matches its validated identity');
    if (walked.failed) throw WorkspaceError.io(path, 'open of the parent', walked.failed);
    return using(walked.dir, (parent) => {
      const stat = statAt(parent, name, path);
      if (stat !== null) {
        if (!isPrivateOwnedDir(stat) || !sameIdentity(identityOf(stat), expected)) {
          throw WorkspaceError.identityChanged(path, 'recursive removal target changed identity');
        }
        this.quarantineAndDelete(path, parent, name, expected);
        return true;
      }
      return this.completeQuarantine(path, parent, expected);
    });
  }

  /** Renames `name` to a fresh quarantine in the parent, re-verifies it, and deletes it. */
  quarantineAndDelete(path, parent, name, expected) {
    const quarantine = `.io-remove-${process.pid}-${uuid()}.quarantine`;
    REMOVING.add(quarantine);
    try {
      // Node has no `renameat2(NOREPLACE)`: the quarantine name is fresh (this pid, a new UUID).
      try {
        fs.renameSync(parent.at(name), parent.at(quarantine));
      } catch (error) {
        throw WorkspaceError.io(path, 'rename to quarantine', error);
      }
      const moved = statAt(parent, quarantine, path, 'statx of the quarantine');
      if (moved === null || !isPrivateOwnedDir(moved) || !sameIdentity(identityOf(moved), expected)) {
        // Swapped between the check and the rename: put it back untouched (never over what
        // appeared at the name meanwhile).
        if (moved !== null && statAt(parent, name, path) === null) {
          try {
            fs.renameSync(parent.at(quarantine), parent.at(name));
          } catch {
            // Left in quarantine: not ours to delete.
          }
        }
        throw WorkspaceError.identityChanged(path, 'recursive removal target changed identity');
      }
      // The tree is out of its path: a recovery that held the lease-creation lock from its last
      // look at the leases until now lets new leases be made while the tree is deleted
      // (`docs/deviations.md` 24); nothing can be leased inside a quarantine.
      this.outOfItsPath();
      try {
        fsyncDir(parent);
      } catch (error) {
        throw WorkspaceError.io(path, 'fsync of the parent', error);
      }
      try {
        deleteTree(parent, quarantine, moved.dev, { left: MAX_REMOVAL_ENTRIES });
      } catch (error) {
        if (error.code === 'EXDEV') throw WorkspaceError.io(path, 'removal (a filesystem is mounted inside the tree: unmount it, then recover again)', error);
        throw WorkspaceError.io(path, 'removal', error);
      }
      try {
        fsyncDir(parent);
      } catch (error) {
        throw WorkspaceError.io(path, 'fsync of the parent', error);
      }
    } finally {
      REMOVING.delete(quarantine);
    }
  }

  /** §3.3 (c): the target is absent; finish an interrupted quarantine of exactly `expected` whose remover is provably dead. */
  completeQuarantine(path, parent, expected) {
    let listed;
    try {
      listed = namesWhere(parent, MAX_SCAN_ENTRIES);
    } catch (error) {
      throw WorkspaceError.io(path, 'scan of the parent', error);
    }
    if (listed.over) throw WorkspaceError.identityChanged(path, `recursive removal recovery exceeds its ${MAX_SCAN_ENTRIES} entry bound`);
    let found = null;
    for (const raw of listed.names) {
      const name = nameText(raw);
      if (name === null) continue;
      const pid = quarantinePid(name);
      if (pid === null) continue;
      const stat = statAt(parent, name, path);
      if (stat === null || !sameIdentity(identityOf(stat), expected)) continue;
      if (!isPrivateOwnedDir(stat)) throw WorkspaceError.identityChanged(path, 'recursive removal quarantine is not a private current-user directory');
      if (found !== null) throw WorkspaceError.identityChanged(path, 'recursive removal identity has multiple quarantine paths');
      found = { name, pid };
    }
    if (found === null) return false;
    // A quarantine of this process that no removal of it is deleting was left by a removal that
    // failed (an I/O error): this process may finish it.
    const abandonedOwn = found.pid === process.pid && !REMOVING.has(found.name);
    if (!abandonedOwn && !definitelyDead(found.pid)) {
      throw WorkspaceError.identityChanged(path, 'recursive removal quarantine owner is live or cannot be proven dead');
    }
    this.quarantineAndDelete(path, parent, found.name, expected);
    return true;
  }
}
