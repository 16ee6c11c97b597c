// Process identity against /proc (lib/process-identity/): the boot id and start ids computed
// independently here from /proc with node:crypto (§2.2, §2.3), capture, probe facts, and what
// this host says of native witness files and run-journal entries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { join } from 'node:path';
import { freshHost } from '../testing/helpers.mjs';

const digest = (kind, value) => createHash('sha256').update(Buffer.concat([Buffer.from(kind), Buffer.from([0]), Buffer.from(value)])).digest('hex');
const bootId = () => digest('io-boot', fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim());
const startField = (pid) => {
  const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').trim();
  return text.slice(text.lastIndexOf(')') + 1).trim().split(/\s+/)[19];
};
const startId = (pid) => digest('io-process-start', `${bootId()}\0${startField(pid)}`);
const inTimeNamespace = () => {
  try {
    return /boottime\s+(-?\d+)\s+(-?\d+)/.exec(fs.readFileSync('/proc/self/timens_offsets', 'utf8')).slice(1).some((n) => n !== '0');
  } catch {
    return false;
  }
};
const offset = inTimeNamespace() ? 'this process runs in a shifted time namespace: start ids are corrected' : false;

test('the boot id and the own identity are the digests of /proc (§2.2, §2.3)', { skip: offset }, async () => {
  const h = await freshHost();
  try {
    const { processes } = h.parts;
    assert.equal(processes.currentBootId(), bootId());
    assert.deepEqual(processes.selfIdentity(), { pid: BigInt(process.pid), bootId: bootId(), processStartId: startId(process.pid) });
    const view = processes.host().view;
    assert.equal(view.pidNamespace, fs.statSync('/proc/self/ns/pid', { bigint: true }).ino);
    assert.equal(view.boottimeOffsetNs, 0n);
    assert.equal(view.clockTicksPerSecond, 100n);
  } finally {
    h.cleanup();
  }
});

test('capture gives a live child its identity and refuses a dead or malformed pid', { skip: offset }, async () => {
  const h = await freshHost();
  const child = spawn('sleep', ['30']);
  try {
    const { processes } = h.parts;
    assert.deepEqual(processes.capture(BigInt(child.pid)), { pid: BigInt(child.pid), bootId: bootId(), processStartId: startId(child.pid) });
    assert.throws(() => processes.capture(0n), { message: 'process identity PID is malformed' });
    assert.throws(() => processes.capture(2n ** 53n), { message: 'process identity PID is malformed' });
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    assert.throws(() => processes.capture(BigInt(child.pid)), { message: 'exact live process identity is unavailable' });
  } finally {
    child.kill('SIGKILL');
    h.cleanup();
  }
});

test('probe reports what /proc shows, and the component judges it', async () => {
  const h = await freshHost();
  const child = spawn('sleep', ['30']);
  try {
    const { processes, liveness } = h.parts;
    const me = processes.selfIdentity();
    const facts = processes.probe(me);
    assert.equal(facts.bootId, bootId());
    assert.equal(facts.witness, 'absent', 'this host takes no witness');
    assert.equal(facts.spawned, 'absent');
    assert.equal(facts.stat.tag, 'stat');
    assert.ok(facts.stat.val.startsWith(`${process.pid} (`), 'its /proc/<pid>/stat');
    assert.ok(facts.tasks >= 1);
    assert.equal(facts.remote, 'not-clustered');
    assert.equal(facts.tree, 'absent');
    assert.equal(liveness.liveness(me).status, 'exact-live-owner');
    const other = processes.capture(BigInt(child.pid));
    assert.equal(liveness.ownerStatus(other), 'exact-live-owner');
    assert.equal(liveness.ownerStatus({ ...other, processStartId: 'f'.repeat(64) }), 'different-or-dead', 'another process on the pid');
    assert.equal(liveness.ownerStatus({ ...other, bootId: 'e'.repeat(64) }), 'different-or-dead', 'another boot');
    assert.deepEqual(processes.probe({ ...other, bootId: 'e'.repeat(64) }).stat, { tag: 'unreadable' }, 'nothing of this machine is read for another boot');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    assert.deepEqual(processes.probe(other).stat, { tag: 'missing' });
    assert.equal(liveness.ownerStatus(other), 'different-or-dead');
  } finally {
    child.kill('SIGKILL');
    h.cleanup();
  }
});

test("a witness is tested by its lock (flock(1)): held is alive, free is gone; another lock domain leaves /proc to decide", async () => {
  const h = await freshHost();
  const child = spawn('true');
  const holders = [];
  // A process that holds `path`'s lock (exclusive) until it is killed, as a native witness's holder
  // does (`--close`: flock(1) alone holds it, not the command it runs).
  const hold = async (path) => {
    const holder = spawn('/usr/bin/flock', ['--exclusive', '--close', path, 'sh', '-c', 'echo held; exec sleep 60'], { stdio: ['ignore', 'pipe', 'inherit'] });
    holders.push(holder);
    await new Promise((r) => holder.stdout.once('data', r));
    return holder;
  };
  const release = async (holder) => {
    holder.kill('SIGKILL');
    await new Promise((r) => (holder.exitCode !== null || holder.signalCode !== null ? r() : holder.once('exit', r)));
    // The kernel drops the lock as the process ends, which `exit` may precede.
    for (let i = 0; i < 500 && h.parts.processes.probe(deadOwner).witness === 'held'; i++) await new Promise((r) => setTimeout(r, 10));
  };
  let deadOwner;
  try {
    await new Promise((r) => child.once('exit', r));
    const { processes, liveness } = h.parts;
    const dead = { pid: BigInt(child.pid), bootId: bootId(), processStartId: 'a'.repeat(64) };
    deadOwner = dead;
    const dir = join(h.parts.home.path, '.proclease/witnesses', dead.bootId);
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const d of ['.proclease/witnesses', `.proclease/witnesses/${dead.bootId}`]) fs.chmodSync(join(h.parts.home.path, d), 0o700);
    const ours = processes.host().view.pidNamespace;
    const path = join(dir, `${dead.pid}-${dead.processStartId}.witness`);
    const witness = (ns, domain = '') =>
      fs.writeFileSync(
        path,
        `{"bootId":"${dead.bootId}","boottimeOffsetNs":0,${domain}"kind":"proclease-witness","pid":${dead.pid},"pidNamespace":"${ns}","processStartId":"${dead.processStartId}","role":"owner","schemaVersion":1,"timeNamespace":"1"}\n`,
        { mode: 0o600 },
      );
    assert.equal(liveness.ownerStatus(dead), 'different-or-dead', 'no witness: /proc of the initial namespace decides (as for ghostget)');

    // Recorded in another PID namespace, where this /proc proves nothing: only the lock can.
    witness(ours + 12345n);
    let facts = processes.probe(dead);
    assert.equal(facts.witness, 'free');
    assert.equal(facts.recordedPidNamespace, ours + 12345n);
    assert.equal(liveness.ownerStatus(dead), 'different-or-dead', 'a free witness proves its holder gone, in any namespace');
    let holder = await hold(path);
    assert.equal(processes.probe(dead).witness, 'held');
    assert.equal(liveness.ownerStatus(dead), 'exact-live-owner', 'a held witness: its holder (or one that inherited it) runs');
    await release(holder);
    assert.equal(processes.probe(dead).witness, 'free', 'the holder is gone');

    // A cgroup record beside it that cannot be read (malformed): a process of that cgroup may
    // run though the lock is free, so the free witness proves nothing (as natively).
    fs.writeFileSync(join(dir, `${dead.pid}-${dead.processStartId}.cgroup`), '{}', { mode: 0o600 });
    facts = processes.probe(dead);
    assert.equal(facts.witness, 'free');
    assert.equal(facts.tree, 'unreadable');
    assert.equal(liveness.ownerStatus(dead), 'unknown');
    fs.unlinkSync(join(dir, `${dead.pid}-${dead.processStartId}.cgroup`));

    // Another lock domain (the file reached through another mount, docs/witness.md): its lock says nothing here.
    witness(ours + 12345n, '"device":"1","inode":"2",');
    assert.equal(processes.probe(dead).witness, 'untestable');
    assert.equal(liveness.ownerStatus(dead), 'unknown');
    const stat = fs.statSync(path, { bigint: true });
    witness(ours + 12345n, `"device":"${stat.dev}","inode":"${stat.ino}",`);
    assert.equal(processes.probe(dead).witness, 'free', 'its own domain: the lock decides');

    // Spawn witnesses: what its owner started.
    assert.equal(processes.probe(dead).spawned, 'absent');
    const spawnPath = join(dir, `${dead.pid}-${dead.processStartId}.spawn-3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d`);
    fs.writeFileSync(spawnPath, '', { mode: 0o600 });
    assert.equal(processes.probe(dead).spawned, 'free', 'every spawn witness free: all it started is gone');
    holder = await hold(spawnPath);
    assert.equal(processes.probe(dead).spawned, 'held', 'one it started still runs');
    holder.kill('SIGKILL');
    const cgroupRecord = join(dir, `${dead.pid}-${dead.processStartId}.cgroup-3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d`);
    for (let i = 0; i < 500 && processes.probe(dead).spawned === 'held'; i++) await new Promise((r) => setTimeout(r, 10));
    fs.writeFileSync(cgroupRecord, '{}', { mode: 0o600 });
    assert.equal(processes.probe(dead).spawned, 'untestable', 'a cgroup record that cannot be read: what it started is not proven gone');
  } finally {
    for (const holder of holders) holder.kill('SIGKILL');
    h.cleanup();
  }
});

/**
 * A cgroup v2 of this process's own (a child of its cgroup), or why none can be made here: the
 * cgroup a native supervisor makes for its command's tree is one like it.
 */
function cgroupHere() {
  const own = /^0::(.*)$/m.exec(fs.readFileSync('/proc/self/cgroup', 'utf8'))?.[1];
  if (own === undefined) return { skip: 'this process is in no cgroup v2' };
  // The cgroup2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid machine) whose
  // root is the hierarchy's root.
  const mount = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' '))
    .find((fields) => fields[fields.indexOf('-', 6) + 1] === 'cgroup2' && fields[3] === '/')?.[4];
  if (mount === undefined) return { skip: 'no cgroup v2 mount of the whole hierarchy' };
  const name = `proclease-node-test-${process.pid}-${Date.now()}`;
  const path = `${own === '/' ? '' : own}/${name}`;
  const dir = join(mount, path);
  try {
    fs.mkdirSync(dir);
  } catch (error) {
    return { skip: `a cgroup cannot be made here (${error.code}): run as root, or in a delegated cgroup subtree` };
  }
  return { path, dir };
}

// Skipped, saying why, where no cgroup can be made; CI (`PROCLEASE_REQUIRE_NAMESPACES=1`) runs it
// and fails it there instead.
const cgroupSkip = (() => {
  const made = cgroupHere();
  if (made.skip) return process.env.PROCLEASE_REQUIRE_NAMESPACES ? false : made.skip;
  fs.rmdirSync(made.dir);
  return false;
})();

test('a cgroup a native supervisor recorded is read as the native host reads it: populated keeps an owner alive though its witness is free; empty, removed or replaced does not; one that cannot be read here leaves it undecided', { skip: cgroupSkip }, async () => {
  const h = await freshHost();
  const gone = spawn('true');
  const cgroup = cgroupHere();
  let sleeper;
  try {
    assert.equal(cgroup.skip, undefined, `PROCLEASE_REQUIRE_NAMESPACES is set: ${cgroup.skip}`);
    await new Promise((r) => gone.once('exit', r));
    const { processes, liveness } = h.parts;
    const dead = { pid: BigInt(gone.pid), bootId: bootId(), processStartId: 'c'.repeat(64) };
    const dir = join(h.parts.home.path, '.proclease/witnesses', dead.bootId);
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const d of ['.proclease/witnesses', `.proclease/witnesses/${dead.bootId}`]) fs.chmodSync(join(h.parts.home.path, d), 0o700);
    const ours = processes.host().view.pidNamespace;
    const identity = `${dead.pid}-${dead.processStartId}`;
    // Its witness is free: no process holds its lock.
    fs.writeFileSync(
      join(dir, `${identity}.witness`),
      `{"bootId":"${dead.bootId}","boottimeOffsetNs":0,"kind":"proclease-witness","pid":${dead.pid},"pidNamespace":"${ours}","processStartId":"${dead.processStartId}","role":"child","schemaVersion":1,"timeNamespace":"1"}\n`,
      { mode: 0o600 },
    );
    const namespace = fs.statSync('/proc/self/ns/cgroup', { bigint: true }).ino;
    const record = (id, ns = namespace, path = cgroup.path) => `{"cgroupId":${id},"cgroupNamespace":${ns},"kind":"proclease-cgroup","path":"${path}","schemaVersion":1}\n`;
    const recordAt = (name, text) => fs.writeFileSync(join(dir, name), text, { mode: 0o600 });
    const id = fs.statSync(cgroup.dir, { bigint: true }).ino;
    recordAt(`${identity}.cgroup`, record(id));
    // A spawn witness it took, free, with the same cgroup recorded beside it.
    const uuid = '3f1c9a52-8d2e-4b7a-9c1d-2e5f6a7b8c9d';
    fs.writeFileSync(join(dir, `${identity}.spawn-${uuid}`), '', { mode: 0o600 });
    recordAt(`${identity}.cgroup-${uuid}`, record(id));

    let facts = processes.probe(dead);
    assert.deepEqual([facts.witness, facts.tree, facts.spawned], ['free', 'empty', 'free'], 'an empty cgroup: the witnesses decide');
    assert.equal(liveness.ownerStatus(dead), 'different-or-dead');

    // A process in the cgroup: the tree lives, whatever the witnesses say.
    sleeper = spawn('sleep', ['60']);
    await new Promise((r) => sleeper.once('spawn', r));
    fs.writeFileSync(join(cgroup.dir, 'cgroup.procs'), String(sleeper.pid));
    facts = processes.probe(dead);
    assert.deepEqual([facts.witness, facts.tree, facts.spawned], ['free', 'populated', 'held']);
    assert.equal(liveness.ownerStatus(dead), 'exact-live-owner', 'a process of its tree runs on');
    // Recorded relative to another cgroup namespace, or malformed: it cannot be read here, and
    // the owner cannot be judged (a process of the tree may run on, whatever the witness says).
    recordAt(`${identity}.cgroup`, record(id, namespace + 1n));
    assert.equal(processes.probe(dead).tree, 'unreadable');
    assert.equal(liveness.ownerStatus(dead), 'unknown');
    recordAt(`${identity}.cgroup-${uuid}`, record(id, namespace + 1n));
    assert.equal(processes.probe(dead).spawned, 'untestable', 'what it started is not proven gone either');
    recordAt(`${identity}.cgroup-${uuid}`, record(id));
    recordAt(`${identity}.cgroup`, record(id, namespace, '/../x'));
    assert.equal(processes.probe(dead).tree, 'unreadable');
    recordAt(`${identity}.cgroup`, record(id));
    assert.equal(processes.probe(dead).tree, 'populated');

    sleeper.kill('SIGKILL');
    await new Promise((r) => sleeper.once('exit', r));
    // `cgroup.events` says `populated 0` once the kernel has finished the process's exit.
    for (let i = 0; i < 500 && processes.probe(dead).tree === 'populated'; i++) await new Promise((r) => setTimeout(r, 10));
    facts = processes.probe(dead);
    assert.deepEqual([facts.witness, facts.tree, facts.spawned], ['free', 'empty', 'free']);
    assert.equal(liveness.ownerStatus(dead), 'different-or-dead');

    // Removed, then another cgroup made under its name: the recorded one is gone for good.
    fs.rmdirSync(cgroup.dir);
    assert.equal(processes.probe(dead).tree, 'empty', 'a removed cgroup can never be joined again');
    fs.mkdirSync(cgroup.dir);
    assert.notEqual(fs.statSync(cgroup.dir, { bigint: true }).ino, id);
    const other = spawn('sleep', ['60']);
    sleeper = other;
    await new Promise((r) => other.once('spawn', r));
    fs.writeFileSync(join(cgroup.dir, 'cgroup.procs'), String(other.pid));
    assert.equal(processes.probe(dead).tree, 'empty', 'another cgroup of the same name is not the recorded one');
    assert.equal(processes.probe(dead).spawned, 'free');
  } finally {
    sleeper?.kill('SIGKILL');
    if (sleeper) await new Promise((r) => (sleeper.exitCode !== null || sleeper.signalCode !== null ? r() : sleeper.once('exit', r)));
    for (let i = 0; cgroup.dir && i < 500; i++) {
      try {
        fs.rmdirSync(cgroup.dir);
        break;
      } catch (error) {
        if (error.code === 'ENOENT') break;
        await new Promise((r) => setTimeout(r, 10));
      }
    }
    h.cleanup();
  }
});

test("finished-run reads a complete native run-journal entry, and forget-run removes it", async () => {
  const h = await freshHost();
  try {
    const { processes } = h.parts;
    const id = '0b8f5a3e-2f4c-4b7e-9d2a-7c1e5f3a9b10';
    assert.equal(processes.finishedRun(id), undefined, 'no journal');
    const runs = join(h.parts.home.path, '.proclease/runs');
    fs.mkdirSync(runs, { mode: 0o700 });
    const record = (value) => {
      const text = JSON.stringify(value);
      return Buffer.from(`${text}${' '.repeat(511 - text.length)}\n`);
    };
    const directory = { device: '2049', inode: '1234567', birthtimeNs: '1700000000000000001' };
    const file = join(runs, `${id}.run`);
    fs.writeFileSync(file, record({ version: 1, leaseId: id, directory, state: 'running' }), { mode: 0o600 });
    assert.equal(processes.finishedRun(id), undefined, 'a running entry proves nothing');
    fs.writeFileSync(file, record({ version: 1, leaseId: id, directory, state: 'finished', exitCode: 0, signal: null }));
    assert.deepEqual(processes.finishedRun(id), { directoryIdentity: directory, exitCode: 0, signal: undefined });
    const torn = fs.readFileSync(file);
    torn.fill(0x78, 10, 40);
    fs.writeFileSync(file, torn);
    assert.equal(processes.finishedRun(id), undefined, 'a torn write is nothing finished');
    processes.forgetRun(id);
    assert.equal(fs.existsSync(file), false);
    assert.equal(processes.finishedRun('../escape'), undefined);
    // A journal directory that is there but cannot be opened (here a symbolic link) proves
    // nothing: an error, so that recovery keeps the run's directory, not "nothing finished".
    fs.rmdirSync(runs);
    fs.symlinkSync('/tmp', runs);
    assert.throws(() => processes.finishedRun(id), /\.proclease\/runs: open failed: .*os error 40/);
  } finally {
    h.cleanup();
  }
});
