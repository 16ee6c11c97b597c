// The state home: the one private directory all lease records live under (spec §3.1, in its
// spirit). Port of `host/src/imports/state_store/home.rs`.
//
// Selection: `stateHome` option (the command line's `--state-home`) > `PROCLEASE_STATE_HOME` >
// `GHOSTGET_STATE_HOME` > `$XDG_DATA_HOME/proclease` > `~/.local/share/proclease` (blank variables
// are ignored; relative paths resolve against the working directory; symbolic links in
// *ancestors* are resolved as the reference's realpath does).
//
// Validation before anything is read or written:
// * never a shared root: `/`, the home directory or its parent, the temporary directory, the
//   working directory, `~/{Desktop,Documents,Downloads,Library,.cache,.config,.local}`,
//   `~/.local/share`, `$XDG_DATA_HOME` itself;
// * the home itself is never a symbolic link; it must be a real directory owned by the user;
// * absent: created (mode 0700) from an existing ancestor that is a real, owned directory not
//   writable by group or others;
// * present and unclaimed: empty, or holding only the reference's state directory names; then
//   made mode 0700 and claimed with the reference's marker `.io-state.json`
//   (`{"kind":"io-state","schemaVersion":1}` + LF), so ghostget accepts it too;
// * a claimed home must already be mode 0700.
//
// It is opened once, `O_DIRECTORY|O_NOFOLLOW`, and the descriptor's identity is checked against
// the validated path; every store path is relative to that descriptor.
import * as fs from 'node:fs';
import * as os from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { StateHomeError, osErrorText } from '../errors.mjs';
import { Dir, euid, fsyncDir, readUpTo, unlinkQuietly, uuid, writeNewFile } from '../fsops.mjs';
import { STATE_DIRECTORIES } from './path.mjs';

/** The reference's ownership marker (§3.1) and its exact content. */
export const MARKER = '.io-state.json';
export const MARKER_CONTENT = '{"kind":"io-state","schemaVersion":1}\n';

const unsafe = (path, reason) => new StateHomeError(`${path}: ${reason}`);
const io = (path, operation, error) => new StateHomeError(`${path}: ${operation} failed: ${osErrorText(error)}`);

/** The environment variable's value, unless absent or blank. */
function variable(env, name) {
  const value = env[name];
  return typeof value === 'string' && value.trim() !== '' ? value : undefined;
}

/**
 * Chooses the state home path and where it came from (`flag`, `PROCLEASE_STATE_HOME`,
 * `GHOSTGET_STATE_HOME`, `default`).
 */
export function selectStateHome(flag, env = process.env) {
  let path;
  let source;
  if (flag !== undefined && flag !== null && flag !== '') {
    [path, source] = [String(flag), 'flag'];
  } else if (variable(env, 'PROCLEASE_STATE_HOME')) {
    [path, source] = [variable(env, 'PROCLEASE_STATE_HOME'), 'PROCLEASE_STATE_HOME'];
  } else if (variable(env, 'GHOSTGET_STATE_HOME')) {
    [path, source] = [variable(env, 'GHOSTGET_STATE_HOME'), 'GHOSTGET_STATE_HOME'];
  } else if (variable(env, 'XDG_DATA_HOME')) {
    [path, source] = [join(variable(env, 'XDG_DATA_HOME'), 'proclease'), 'default'];
  } else {
    const home = variable(env, 'HOME');
    if (!home) throw new StateHomeError('no state home: set --state-home or PROCLEASE_STATE_HOME to a dedicated directory');
    [path, source] = [join(home, '.local/share/proclease'), 'default'];
  }
  return { path: lexicalAbsolute(path), source };
}

/** `path` made absolute against the working directory and lexically normalised (links not resolved). */
export const lexicalAbsolute = (path) => resolve(path);

const lstatOrNull = (path) => {
  try {
    return fs.lstatSync(path);
  } catch {
    return null;
  }
};

/** The physical path: the deepest existing *ancestor* resolved with realpath, the rest appended; the final component is never resolved. */
function physical(path) {
  if (path === '/') return path;
  const name = basename(path);
  let existing = dirname(path);
  const missing = [];
  while (lstatOrNull(existing) === null && existing !== '/') {
    missing.push(basename(existing));
    existing = dirname(existing);
  }
  let resolved;
  try {
    resolved = fs.realpathSync(existing);
  } catch (error) {
    throw io(existing, 'realpath', error);
  }
  let isDir = false;
  try {
    isDir = fs.statSync(resolved).isDirectory();
  } catch {
    isDir = false;
  }
  if (!isDir) throw unsafe(existing, 'a state home ancestor is not a directory');
  for (const part of missing.reverse()) resolved = join(resolved, part);
  return join(resolved, name);
}

function isSharedRoot(path, env) {
  const canonical = (p) => {
    try {
      return fs.realpathSync(p);
    } catch {
      return p;
    }
  };
  const shared = ['/', canonical(os.tmpdir())];
  try {
    shared.push(canonical(process.cwd()));
  } catch {
    // No working directory: nothing to compare with.
  }
  const homeVar = env.HOME;
  if (homeVar) {
    const home = canonical(homeVar);
    shared.push(dirname(home));
    for (const child of ['Desktop', 'Documents', 'Downloads', 'Library', '.cache', '.config', '.local', '.local/share']) shared.push(join(home, child));
    shared.push(home);
  }
  if (env.XDG_DATA_HOME) shared.push(canonical(env.XDG_DATA_HOME));
  return shared.includes(path);
}

/** `^\.io-state\.stage-\d+-[0-9a-f-]{36}\.json$`: a marker being published (§3.1). */
const isMarkerStage = (name) => /^\.io-state\.stage-[0-9]+-[0-9a-f-]{36}\.json$/.test(name);

function validatePresent(path, meta) {
  if (meta.isSymbolicLink()) throw unsafe(path, 'the state home is a symbolic link; point proclease at the real directory');
  if (!meta.isDirectory()) throw unsafe(path, 'the state home is not a directory');
  if (meta.uid !== euid()) throw unsafe(path, 'the state home must be a directory owned by you');
  const mode = meta.mode & 0o777;
  if (lstatOrNull(join(path, MARKER)) !== null) {
    if (mode !== 0o700) throw unsafe(path, `the state home must be private (mode 0700, is ${mode.toString(8)}); run chmod 700 on it`);
    return;
  }
  let entries;
  try {
    entries = fs.readdirSync(path);
  } catch (error) {
    throw io(path, 'list', error);
  }
  // Another process may be claiming the same home right now: its marker stage and marker, and
  // the store's own directory, are not foreign (§3.1 allows interrupted marker stages).
  const foreign = entries.filter((name) => !STATE_DIRECTORIES.includes(name) && name !== '.proclease' && name !== MARKER && !isMarkerStage(name));
  if (foreign.length > 0) throw unsafe(path, `is not empty and not a state home (it holds ${JSON.stringify(foreign[0])}); choose a dedicated directory`);
  if (entries.length === 0 && (mode & 0o022) !== 0) {
    throw unsafe(path, `an unclaimed state home must not be group/world-writable (mode ${mode.toString(8)}); use a private directory`);
  }
  if (entries.length > 0 && mode !== 0o700) throw unsafe(path, `the state home must be private (mode 0700, is ${mode.toString(8)}); run chmod 700 on it`);
  try {
    fs.chmodSync(path, 0o700);
  } catch (error) {
    throw io(path, 'chmod 700', error);
  }
}

/** Creates the state home and its missing ancestors (0700) from the nearest existing ancestor, which must be a real, owned directory that group and others cannot write. */
function create(path) {
  let anchor = path;
  while (lstatOrNull(anchor) === null) {
    if (anchor === '/') throw unsafe(path, 'has no existing ancestor to create it in');
    anchor = dirname(anchor);
  }
  const meta = fs.lstatSync(anchor);
  if (!meta.isDirectory() || meta.uid !== euid() || (meta.mode & 0o022) !== 0) {
    throw unsafe(
      anchor,
      `cannot create the state home ${path} here: the nearest existing ancestor must be a real directory owned by you and not writable by group or others`,
    );
  }
  try {
    fs.mkdirSync(path, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw io(path, 'mkdir', error);
  }
  try {
    fs.chmodSync(path, 0o700);
  } catch (error) {
    throw io(path, 'chmod 700', error);
  }
  try {
    const parent = Dir.open(dirname(path));
    try {
      fsyncDir(parent);
    } finally {
      parent.close();
    }
  } catch {
    // Best effort, as the native host's.
  }
}

/** Publishes the reference's ownership marker if absent (temp, fsync, link, fsync), and checks an existing one is exactly it. */
function claim(dir, path) {
  const marker = join(path, MARKER);
  let fd;
  try {
    fd = fs.openSync(dir.at(MARKER), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    if (error.code === 'ELOOP') throw unsafe(marker, 'the state home marker is a symbolic link; remove it');
    if (error.code !== 'ENOENT') throw io(marker, 'open', error);
    const stage = `.io-state.stage-${process.pid}-${uuid()}.json`;
    try {
      writeNewFile(dir, stage, MARKER_CONTENT);
      try {
        fs.linkSync(dir.at(stage), dir.at(MARKER));
      } catch (linkError) {
        if (linkError.code !== 'EEXIST') throw linkError;
      }
    } catch (publishError) {
      unlinkQuietly(dir, stage);
      throw io(marker, 'publishing the state home marker', publishError);
    }
    unlinkQuietly(dir, stage);
    try {
      fsyncDir(dir);
    } catch (syncError) {
      throw io(path, 'fsync', syncError);
    }
    return;
  }
  try {
    const stat = fs.fstatSync(fd);
    const content = readUpTo(fd, 257);
    const privateFile = (stat.mode & 0o170077) === 0o100000 && stat.uid === euid();
    if (!privateFile || content.toString('utf8') !== MARKER_CONTENT) {
      throw unsafe(marker, 'the state home marker is not the expected private file; inspect it before going on');
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** A validated, opened state home: its path and its directory. */
export class StateHome {
  /** Validates, creates or claims (module docs) and opens the state home at `path`. */
  static open(path, env = process.env) {
    path = physical(lexicalAbsolute(path));
    if (isSharedRoot(path, env)) {
      throw new StateHomeError(
        `${path}: a state home must be a dedicated child directory, not a filesystem, home, temporary, working or shared data root; choose e.g. ~/.local/share/proclease`,
      );
    }
    const meta = lstatOrNull(path);
    if (meta !== null) validatePresent(path, meta);
    else create(path);
    let dir;
    try {
      dir = Dir.open(path);
    } catch (error) {
      if (error.code === 'ELOOP' || error.code === 'ENOTDIR') throw unsafe(path, 'the state home is a symbolic link; point proclease at the real directory');
      throw io(path, 'open', error);
    }
    try {
      const opened = dir.stat();
      const now = fs.lstatSync(path, { bigint: true });
      if (opened.dev !== now.dev || opened.ino !== now.ino) throw unsafe(path, 'the state home changed while it was opened; retry');
      claim(dir, path);
    } catch (error) {
      dir.close();
      throw error;
    }
    return new StateHome(path, dir);
  }

  constructor(path, dir) {
    /** The state home's absolute path (for messages; all access goes through `dir`). */
    this.path = path;
    /** The state home's directory. */
    this.dir = dir;
  }

  close() {
    this.dir.close();
  }
}
