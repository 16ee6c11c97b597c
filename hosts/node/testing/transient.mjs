// Which failures of the artifact's `state-store` export a compare-and-swap loop retries, as
// store_worker and Python's tests/worker.py do: nothing was changed, and trying again succeeds
// once the other writers pause.
//   - `contended`: another writer was mid-mutation past the store's bound;
//   - "changed while it was read": a read overlapped replaces again and again (§3.2: replacing a
//     record unlinks the inode being read, which moves its ctime);
//   - "did not reach a stable snapshot": a listing overlapped changes again and again.
// Export errors are thrown as the raw failure record (`{kind, message, …}`), or inside `payload`.
const TRANSIENT = ['changed while it was read', 'did not reach a stable snapshot'];

export function isTransient(error) {
  const failure = error?.payload ?? error;
  return failure?.kind === 'contended' || TRANSIENT.some((words) => String(failure?.message ?? '').includes(words));
}
