//! The state store on etcd v3 (feature `cluster`; the design is `docs/cluster.md`): the same
//! primitives, bounds and messages as the file store, each compare-and-swap one etcd
//! transaction.
//!
//! Cluster mode uses it for the shared collections only ([`crate::cluster::ClusterStore`]),
//! with a presence registry judging owners of other boot ids: never share a prefix between
//! machines without that registry (an owner recorded on another boot id would be judged dead,
//! §2.4).
//!
//! Layout under the prefix `P` of `etcd://HOST:PORT/P`:
//! - a record at store path `dir/name.json` is the key `P/f/dir/name.json`, holding the record's
//!   exact bytes (so a record copied out is a valid file-store record);
//! - a directory `dir` exists when the marker key `P/d/dir` does; its identity (what the file
//!   store reads from `st_dev`/`st_ino`) is device `etcd`, inode the marker's create revision —
//!   a directory removed and created again is another directory, as on a disk.
//!
//! | primitive | transaction |
//! |---|---|
//! | create-if-absent | `If(CreateRevision(f) == 0) Then(Put(f), Txn(If(CreateRevision(marker) == 0) Then(Put(marker)))…)`: the parents' missing markers in the same round trip |
//! | replace-if-unchanged | read `f`; unless its sha256 is the expected one, `false`; else `If(ModRevision(f) == read) Then(Put(f))`, read again when another write came between |
//! | remove-if-unchanged | the same with `Delete(f)` |
//! | snapshot | one transaction reading the marker and both prefixes at one revision |
//! | read-batch | `If(CreateRevision(marker) == expected) Then(Get(f)…)`: every file at one revision, the directory unchanged |
//!
//! There are no mutation claims and no kernel locks here: the transaction is the claim. A store
//! fenced with an owner's presence ([`EtcdStore::fence_with`]) also compares that presence in
//! every write's transaction, so an owner whose etcd lease expired cannot write.
//! ghostget has no etcd store, so no other protocol shares these keys.
//!
//! Failures: etcd unreachable or not answering within the command timeout ([`EtcdTimeouts`],
//! default [`TIMEOUT`]) is [`StoreError::Unreachable`] naming
//! the endpoint; a write whose answer was lost may or may not have been applied, and the
//! message says to read before retrying (the compare-and-swap callers do: a retry that finds
//! its own record reads it as changed and starts over).

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, KvClient, TlsOptions, Txn, TxnOp, TxnOpResponse};
use proclease_core::digest;
use proclease_core::effects::{BatchInvalid, BatchStatus, CollectionEntry, CollectionIdentity, CollectionSnapshot, EntryKind, Failure, Store};

pub use crate::cluster::{EtcdTimeouts, EtcdTlsFiles};

/// One endpoint's client, once it connected and answered.
struct Member {
    /// `http(s)://HOST:PORT`.
    url: String,
    client: std::sync::Mutex<Option<Client>>,
    /// A connection attempt runs in the background.
    connecting: std::sync::atomic::AtomicBool,
}

impl Member {
    fn client(&self) -> Option<Client> {
        self.client.lock().ok().and_then(|client| client.clone())
    }
}

/// Connects `member` and asks it one read (a count of `probe`), within `dial`: its client
/// once it answered, else why not.
async fn connect_member(member: std::sync::Arc<Member>, options: ConnectOptions, probe: String, dial: Duration) -> Result<Client, etcd_client::Error> {
    let attempt = async {
        let client = Client::connect([member.url.clone()], Some(options)).await?;
        client.kv_client().get(probe, Some(GetOptions::new().with_count_only())).await?;
        Ok::<Client, etcd_client::Error>(client)
    };
    let outcome = match tokio::time::timeout(dial, attempt).await {
        Ok(outcome) => outcome,
        Err(_) => Err(etcd_client::Error::InvalidArgs(format!("{} did not answer within {}", member.url, humantime::format_duration(dial)))),
    };
    if let (Ok(client), Ok(mut slot)) = (&outcome, member.client.lock()) {
        *slot = Some(client.clone());
    }
    member.connecting.store(false, std::sync::atomic::Ordering::SeqCst);
    outcome
}

use super::path;
use super::{MAX_ENTRIES, StoreError, check_batch, check_hash, check_size, failure, split};

/// How long one etcd request may take, connecting included, before the store gives up with an
/// error naming the endpoint.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// How many times a compare-and-swap re-reads a record that another writer changed between its
/// read and its transaction, while the record still hashes to the expected content.
const CAS_ATTEMPTS: usize = 16;

/// A state store on one etcd cluster (one or more endpoints) and key prefix. Cheap to share (`Arc`); every method may
/// be called from any thread.
pub struct EtcdStore {
    runtime: tokio::runtime::Runtime,
    /// One client per endpoint, each connected on its own, so that a hung member is passed
    /// over ([`EtcdStore::pass_over`]) rather than waited for.
    members: Vec<std::sync::Arc<Member>>,
    /// The member requests go to: the first that answered, until it fails to.
    preferred: std::sync::atomic::AtomicUsize,
    /// The first member that answered (always connected): the client when no other is.
    fallback: Client,
    /// How long a member and an operation may take.
    timeouts: EtcdTimeouts,
    /// How to connect a member again.
    options: ConnectOptions,
    endpoint: String,
    prefix: String,
    /// The presence key and etcd lease every record write is fenced with
    /// ([`EtcdStore::fence_with`]).
    fence: std::sync::Mutex<Option<(String, i64)>>,
    /// The etcd user it authenticates as, if any ([`EtcdCredentials`]).
    user: Option<String>,
    /// Whether it speaks TLS ([`EtcdTlsFiles`]): `Some(with a client certificate)`.
    tls: Option<bool>,
}

pub use crate::cluster::{PASSWORD_FILE_VARIABLE, PASSWORD_VARIABLE, USER_VARIABLE};

/// An etcd user and its password, from the environment — never from the command line or the
/// address, and never printed (its `Debug` shows the user only).
#[derive(Clone)]
pub struct EtcdCredentials {
    /// The user.
    pub user: String,
    password: String,
}

impl std::fmt::Debug for EtcdCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCredentials").field("user", &self.user).finish_non_exhaustive()
    }
}

impl EtcdCredentials {
    /// `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        EtcdCredentials { user: user.into(), password: password.into() }
    }

    /// The credentials [`USER_VARIABLE`] and [`PASSWORD_FILE_VARIABLE`] (or
    /// [`PASSWORD_VARIABLE`]) give; `None` when no user is set.
    ///
    /// Errors: a password without a user, a user without a password, a password file that
    /// cannot be read or that others may read.
    pub fn from_environment() -> Result<Option<EtcdCredentials>, String> {
        EtcdCredentials::from_variables(|name| if name == PASSWORD_VARIABLE { crate::cluster::password_from_environment() } else { std::env::var(name).ok() })
    }

    /// [`EtcdCredentials::from_environment`] with the variables `lookup` gives (an empty value
    /// is unset).
    ///
    /// Errors: as [`EtcdCredentials::from_environment`].
    pub fn from_variables(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<EtcdCredentials>, String> {
        let variable = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let (user, file, password) = (variable(USER_VARIABLE), variable(PASSWORD_FILE_VARIABLE), variable(PASSWORD_VARIABLE));
        let Some(user) = user else {
            if file.is_some() || password.is_some() {
                return Err(format!("an etcd password is set but no user: set {USER_VARIABLE} too"));
            }
            return Ok(None);
        };
        let password = match (file, password) {
            (Some(file), _) => {
                check_private_file(std::path::Path::new(&file), &format!("{PASSWORD_FILE_VARIABLE} file"))?;
                let text = std::fs::read_to_string(&file).map_err(|e| format!("{PASSWORD_FILE_VARIABLE}={file}: {e}"))?;
                text.strip_suffix('\n').unwrap_or(&text).to_owned()
            }
            (None, Some(password)) => password,
            (None, None) => return Err(format!("{USER_VARIABLE} is set but no password: set {PASSWORD_FILE_VARIABLE} to a file that holds it")),
        };
        Ok(Some(EtcdCredentials { user, password }))
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").field("endpoint", &self.endpoint).field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

pub use crate::cluster::EtcdAddress;

impl EtcdStore {
    /// Connects to the etcd of `url` (`etcd://HOST:PORT[,HOST:PORT…]/PREFIX`).
    ///
    /// Errors: [`StoreError::Refused`] for a malformed address; [`StoreError::Unreachable`] when etcd
    /// cannot be reached within [`TIMEOUT`].
    pub fn connect(url: &str) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_configured(url, None)
    }

    /// [`EtcdStore::connect_with`] the credentials of the environment ([`EtcdCredentials::from_environment`])
    /// and `tls`, else the TLS files of the environment ([`EtcdTlsFiles::from_environment`]):
    /// how the command line and [`HostBuilder`](crate::HostBuilder) connect.
    ///
    /// Errors: as [`EtcdStore::connect_with`]; [`StoreError::Refused`] for variables that do
    /// not fit together.
    pub fn connect_configured(url: &str, tls: Option<&EtcdTlsFiles>) -> Result<EtcdStore, StoreError> {
        let shown = crate::cluster::without_credentials(url).unwrap_or_else(|| url.into());
        let address = EtcdAddress::parse(url).map_err(|reason| StoreError::Refused { path: shown, reason })?;
        EtcdStore::connect_configured_to(&address, tls)
    }

    /// [`EtcdStore::connect_configured`] to an address parsed before
    /// ([`StoreAddress`](crate::cluster::StoreAddress)).
    ///
    /// Errors: as [`EtcdStore::connect_configured`].
    pub fn connect_configured_to(address: &EtcdAddress, tls: Option<&EtcdTlsFiles>) -> Result<EtcdStore, StoreError> {
        let refused = |reason| StoreError::Refused { path: address.url(), reason };
        let credentials = EtcdCredentials::from_environment().map_err(refused)?;
        let tls = match tls {
            Some(tls) => Some(tls.clone()),
            None => EtcdTlsFiles::from_environment().map_err(refused)?,
        };
        let timeouts = EtcdTimeouts::from_environment().map_err(refused)?;
        EtcdStore::connect_within(address, credentials, tls.as_ref(), timeouts)
    }

    /// [`EtcdStore::connect`] as the etcd user of `credentials` (an etcd with authentication);
    /// its token is renewed when it expires. Plain text.
    ///
    /// Errors: as [`EtcdStore::connect`]; [`StoreError::Refused`] when etcd refuses the
    /// credentials, requires some, or denies the user the prefix — saying which.
    pub fn connect_as(url: &str, credentials: Option<EtcdCredentials>) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_with(url, credentials, None)
    }

    /// [`EtcdStore::connect_as`], over TLS when `tls` is given (the CA that signed the members'
    /// certificates, and a client certificate for an etcd that requires one).
    ///
    /// Errors: as [`EtcdStore::connect_as`]; [`StoreError::Refused`] when a TLS file cannot be
    /// read (or a key file is readable by others), and when the TLS handshake fails — saying
    /// whether the server's certificate was not trusted or etcd wanted a client certificate.
    pub fn connect_with(url: &str, credentials: Option<EtcdCredentials>, tls: Option<&EtcdTlsFiles>) -> Result<EtcdStore, StoreError> {
        let shown = crate::cluster::without_credentials(url).unwrap_or_else(|| url.to_owned());
        let address = EtcdAddress::parse(url).map_err(|reason| StoreError::Refused { path: shown, reason })?;
        EtcdStore::connect_to(&address, credentials, tls)
    }

    /// [`EtcdStore::connect_with`] an address parsed before.
    ///
    /// Errors: as [`EtcdStore::connect_with`], but for the address's shape.
    pub fn connect_to(address: &EtcdAddress, credentials: Option<EtcdCredentials>, tls: Option<&EtcdTlsFiles>) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_within(address, credentials, tls, EtcdTimeouts::default())
    }

    /// [`EtcdStore::connect_to`] with `timeouts`: every endpoint is connected on its own, at
    /// once, and the first that answers takes the requests; one that does not answer within
    /// `timeouts.dial` is passed over (it keeps connecting in the background).
    ///
    /// Errors: as [`EtcdStore::connect_to`] — when no endpoint answers, the first endpoint's
    /// reason.
    pub fn connect_within(address: &EtcdAddress, credentials: Option<EtcdCredentials>, tls: Option<&EtcdTlsFiles>, timeouts: EtcdTimeouts) -> Result<EtcdStore, StoreError> {
        let url = &address.url();
        let shown = url.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("proclease-etcd")
            .enable_all()
            .build()
            .map_err(|e| StoreError::io(url, "starting the etcd client", e))?;
        let mut options = ConnectOptions::new().with_connect_timeout(timeouts.dial).with_timeout(timeouts.command);
        let user = credentials.as_ref().map(|c| c.user.clone());
        if let Some(credentials) = credentials {
            options = options.with_user(credentials.user, credentials.password).with_auto_token_refresh(true);
        }
        if let Some(tls) = tls {
            options = options.with_tls(tls_options(tls).map_err(|reason| StoreError::Refused { path: shown.clone(), reason })?);
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let members: Vec<std::sync::Arc<Member>> = address
            .endpoints
            .iter()
            .map(|endpoint| {
                std::sync::Arc::new(Member { url: format!("{scheme}://{endpoint}"), client: std::sync::Mutex::new(None), connecting: std::sync::atomic::AtomicBool::new(true) })
            })
            .collect();
        // Every member at once; the first to answer a read takes the requests. A first request,
        // so that an address nothing answers at fails here, not at the first write. Members that
        // all fail within the dial timeout (the leader stopped: no read is served until another
        // is elected) are asked again, until the command timeout.
        let probe = format!("{}/d", address.prefix);
        let deadline = std::time::Instant::now() + timeouts.command;
        let mut first_error: Option<(usize, etcd_client::Error)> = None;
        let connected = 'rounds: loop {
            let (sender, answers) = std::sync::mpsc::channel();
            for (index, member) in members.iter().enumerate() {
                let (member, options, probe, sender) = (member.clone(), options.clone(), probe.clone(), sender.clone());
                member.connecting.store(true, std::sync::atomic::Ordering::SeqCst);
                runtime.spawn(async move {
                    let _ = sender.send((index, connect_member(member, options, probe, timeouts.dial).await));
                });
            }
            drop(sender);
            loop {
                match answers.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
                    Ok((index, Ok(client))) => break 'rounds Some((index, client)),
                    Ok((index, Err(e))) => {
                        let refused = auth_refusal(&e, user.as_deref(), &address.prefix).is_some()
                            || tls_refusal(&e, tls.map(|files| files.cert.is_some()), true, &address.endpoint).is_some_and(|(_, certain)| certain);
                        if first_error.as_ref().is_none_or(|(first, _)| index <= *first) {
                            first_error = Some((index, e));
                        }
                        if refused {
                            break 'rounds None;
                        }
                    }
                    // Every member answered with an error: another round, while time is left.
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) if std::time::Instant::now() + Duration::from_millis(100) < deadline => {
                        std::thread::sleep(Duration::from_millis(100));
                        continue 'rounds;
                    }
                    Err(_) => break 'rounds None,
                }
            }
        };
        let Some((index, fallback)) = connected else {
            return Err(match first_error {
                Some((_, e)) => match auth_refusal(&e, user.as_deref(), &address.prefix)
                    .or_else(|| tls_refusal(&e, tls.map(|files| files.cert.is_some()), true, &address.endpoint).map(|(reason, _)| reason))
                {
                    Some(reason) => StoreError::Refused { path: shown.clone(), reason },
                    None => unreachable_error(url, &address.endpoint, "connecting", &e.to_string(), timeouts.command),
                },
                None => unreachable_error(url, &address.endpoint, "connecting", "no answer", timeouts.command),
            });
        };
        Ok(EtcdStore {
            runtime,
            members,
            preferred: std::sync::atomic::AtomicUsize::new(index),
            fallback,
            timeouts,
            options,
            endpoint: address.endpoint.clone(),
            prefix: address.prefix.clone(),
            fence: std::sync::Mutex::new(None),
            user,
            tls: tls.map(|files| files.cert.is_some()),
        })
    }

    /// Passes over member `failed` (it did not answer in time, or could not be reached): the
    /// next member that answered before takes the requests, and every member without a client
    /// is connected again in the background. Returns the member now preferred.
    pub(crate) fn pass_over(&self, failed: usize) -> usize {
        use std::sync::atomic::Ordering;
        let count = self.members.len();
        let next = (1..count).map(|step| (failed + step) % count).find(|&index| self.members[index].client().is_some()).unwrap_or(failed);
        let now = match self.preferred.compare_exchange(failed, next, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => next,
            Err(current) => current,
        };
        if next != failed {
            tracing::debug!(failed = %self.members[failed].url, now = %self.members[now].url, "an etcd member did not answer in time: passed over");
        }
        for member in &self.members {
            if member.client().is_none() && !member.connecting.swap(true, Ordering::SeqCst) {
                let probe = format!("{}/d", self.prefix);
                drop(self.runtime.spawn(connect_member(member.clone(), self.options.clone(), probe, self.timeouts.dial)));
            }
        }
        now
    }

    /// The member requests go to now.
    pub(crate) fn preferred(&self) -> usize {
        self.preferred.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How long a member and an operation may take.
    pub fn timeouts(&self) -> EtcdTimeouts {
        self.timeouts
    }

    /// Fences every later record write of this store with `presence_key` under etcd lease
    /// `lease` (`docs/cluster.md`, "Fencing"): each create, replace and remove also compares, in
    /// its own transaction, that the key is still attached to that lease. Once the lease has
    /// expired or been revoked — another machine may then judge this owner gone and take over —
    /// every write fails with [`StoreError::Unsafe`] and changes nothing.
    pub fn fence_with(&self, presence_key: &str, lease: i64) {
        if let Ok(mut fence) = self.fence.lock() {
            *fence = Some((presence_key.into(), lease));
        }
    }

    /// The fence's comparison, when there is one.
    fn fence(&self) -> Option<(String, i64)> {
        self.fence.lock().ok().and_then(|f| f.clone())
    }

    /// Whether the fence (if any) still holds; called after a write's transaction failed, to
    /// tell a lost presence from a lost compare-and-swap.
    fn check_fence(&self, path: &str) -> Result<(), StoreError> {
        let Some((key, lease)) = self.fence() else { return Ok(()) };
        let response = self.run(path, "checking the cluster presence", || {
            let (mut kv, key) = (self.kv(), key.clone());
            async move { kv.get(key, None).await }
        })?;
        match response.kvs().first() {
            Some(kv) if kv.lease() == lease => Ok(()),
            _ => Err(StoreError::unsafe_(
                path,
                "this process's cluster presence (its etcd lease) is gone, so it may no longer write: another machine may have taken over its leases; nothing was changed",
            )),
        }
    }

    /// `when` with the fence's comparison added.
    fn fenced(&self, mut when: Vec<Compare>) -> Vec<Compare> {
        if let Some((key, lease)) = self.fence() {
            when.push(Compare::lease(key, CompareOp::Equal, lease));
        }
        when
    }

    /// `HOST:PORT`, or the endpoints comma-separated (etcdctl's `--endpoints` form).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The client of the member requests go to now (for the presence registry,
    /// `cluster::presence`).
    pub(crate) fn client(&self) -> Client {
        self.members.get(self.preferred()).and_then(|member| member.client()).unwrap_or_else(|| self.fallback.clone())
    }

    /// The key prefix, with its leading `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Runs `future` on the client's runtime, at most `timeout`; `None` when it timed out.
    pub(crate) fn block_on<T>(&self, timeout: Duration, future: impl Future<Output = T>) -> Option<T> {
        self.runtime.block_on(async { tokio::time::timeout(timeout, future).await }).ok()
    }

    fn kv(&self) -> KvClient {
        self.client().kv_client()
    }

    /// This store's address, `etcd://HOST:PORT/PREFIX`.
    pub fn address(&self) -> String {
        format!("etcd://{}{}", self.endpoint, self.prefix)
    }

    /// Where the record at store path `path` is, for a message: `etcd://HOST:PORT/PREFIX/f/path`.
    pub fn location_of(&self, path: &str) -> String {
        format!("etcd://{}{}", self.endpoint, self.file_key(path))
    }

    /// The etcd key of the record at store path `path` (`/PREFIX/f/path`).
    pub fn key_of(&self, path: &str) -> String {
        self.file_key(path)
    }

    fn file_key(&self, path: &str) -> String {
        format!("{}/f/{path}", self.prefix)
    }

    fn dir_key(&self, dir: &str) -> String {
        format!("{}/d/{dir}", self.prefix)
    }

    /// Runs one request to completion on the client's runtime, at most the command timeout
    /// ([`EtcdTimeouts`]), each attempt at one member at most the dial timeout; a failure
    /// names the endpoint (for `path`, doing `operation`). A request that failed in a way
    /// known not to have applied it ([`not_applied`]: it never reached a member, or etcd refused
    /// it before proposing it; for a read, any unavailable member) is made again by `request`
    /// within the same bound — with several endpoints, the client's next try goes to a member
    /// that answers. A write whose answer was lost is never retried here.
    pub(crate) fn run<T, F, R>(&self, path: &str, operation: &'static str, mut request: R) -> Result<T, StoreError>
    where
        R: FnMut() -> F,
        F: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = std::time::Instant::now() + self.timeouts.command;
        let mut pause = Duration::from_millis(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // A request that can be made again at another member gets at most the dial timeout
            // at this one: a hung member costs that, not the whole bound. A write, which is never
            // made again blindly, keeps the whole bound (a slow member is better than none): it
            // goes to the member that answered last, which a hung one was passed over for.
            let member = self.preferred();
            let attempt = if retried_after_silence(operation) { left.min(self.timeouts.dial) } else { left };
            match self.runtime.block_on(async { tokio::time::timeout(attempt, request()).await }) {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) => {
                    let certain = auth_refusal(&e, self.user.as_deref(), &self.prefix).map(|reason| (reason, true));
                    let refusal = certain.or_else(|| tls_refusal(&e, self.tls, operation == "connecting", &self.endpoint));
                    let retry = refusal.as_ref().is_none_or(|(_, certain)| !certain);
                    if retry && not_applied(&e, is_read(operation)) && std::time::Instant::now() + pause < deadline {
                        tracing::debug!(path, operation, error = %e, "etcd did not apply the request; retrying");
                        self.pass_over(member);
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(500));
                        continue;
                    }
                    return Err(match refusal {
                        Some((reason, _)) => StoreError::Refused { path: path.into(), reason },
                        None => unreachable_error(path, &self.endpoint, operation, &e.to_string(), self.timeouts.command),
                    });
                }
                Err(_) => {
                    // The member did not answer in time: the next request goes to another. A
                    // read, or a lease grant (an extra lease expires by itself), is made again
                    // there; a write may have been applied, so it is not.
                    self.pass_over(member);
                    if retried_after_silence(operation) && std::time::Instant::now() + Duration::from_millis(10) < deadline {
                        tracing::debug!(path, operation, "an etcd member did not answer in time; asking another");
                        continue;
                    }
                    return Err(unreachable_error(path, &self.endpoint, operation, "no answer", self.timeouts.command));
                }
            }
        }
    }

    /// Runs `txn`: whether its comparisons held, and the responses of the branch taken.
    fn txn(&self, path: &str, operation: &'static str, txn: Txn) -> Result<(bool, Vec<TxnOpResponse>), StoreError> {
        let (held, responses, _) = self.txn_at(path, operation, txn)?;
        Ok((held, responses))
    }

    /// [`EtcdStore::txn`], with the revision of the store at which it ran.
    fn txn_at(&self, path: &str, operation: &'static str, txn: Txn) -> Result<(bool, Vec<TxnOpResponse>, i64), StoreError> {
        let response = self.run(path, operation, || {
            let (mut kv, txn) = (self.kv(), txn.clone());
            async move { kv.txn(txn).await }
        })?;
        let revision = response.header().map_or(0, |header| header.revision());
        Ok((response.succeeded(), response.op_responses(), revision))
    }

    /// The etcd revision of the last write of the record at `path` (its mod revision), when it
    /// holds the content whose sha256 is `expected_sha256`; `None` when it is absent or holds
    /// something else. Read by the owner right after the write that made the record its own —
    /// no other writer can change it while that owner holds it — this is a **fencing token**:
    /// etcd's revision grows with every write of the cluster, so every later owner's is greater
    /// (`docs/cluster.md`, "Fencing tokens").
    ///
    /// Errors: etcd unreachable.
    pub fn revision_if_unchanged(&self, path: &str, expected_sha256: &str) -> Result<Option<i64>, StoreError> {
        let Some((bytes, revision)) = self.get(path, self.file_key(path))? else { return Ok(None) };
        Ok((digest::sha256_hex(&bytes) == expected_sha256).then_some(revision))
    }

    /// The record at `path` as it was at etcd revision `revision` (at least 1), with the
    /// revision of the write that left it so (its mod revision, at most `revision`); `None`:
    /// absent then. At most `max_bytes`, UTF-8.
    ///
    /// Errors: a revision below 1 ([`StoreError::Refused`]: etcd would read the latest);
    /// etcd unreachable; `revision` compacted away by etcd, or not reached yet
    /// ([`StoreError::Unsafe`]); a record over the bound or not UTF-8.
    pub fn read_at(&self, path: &str, revision: i64, max_bytes: u32) -> Result<Option<(String, i64)>, StoreError> {
        split(path)?;
        if revision < 1 {
            return Err(StoreError::Refused { path: path.into(), reason: format!("{revision} is not an etcd revision (they start at 1)") });
        }
        let key = self.file_key(path);
        let response = self
            .run(path, "read", || {
                let (mut kv, key) = (self.kv(), key.clone());
                async move { kv.get(key, Some(GetOptions::new().with_revision(revision))).await }
            })
            .map_err(|error| match &error {
                error if unavailable_revision(error) => StoreError::unsafe_(path, format!("etcd no longer has (compacted) or does not have yet revision {revision}")),
                _ => error,
            })?;
        let Some(kv) = response.kvs().first() else { return Ok(None) };
        Ok(Some((text_within(path, kv.value().to_vec(), max_bytes)?, kv.mod_revision())))
    }

    /// The value and mod revision of `key`, if present.
    fn get(&self, path: &str, key: String) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        let response = self.run(path, "read", || {
            let (mut kv, key) = (self.kv(), key.clone());
            async move { kv.get(key, None).await }
        })?;
        Ok(response.kvs().first().map(|kv| (kv.value().to_vec(), kv.mod_revision())))
    }

    /// The file's text, or `None` when absent (`readPrivateStateFileIfPresent`, §3.3): at most
    /// `max_bytes`, UTF-8.
    pub fn read_if_present(&self, path: &str, max_bytes: u32) -> Result<Option<String>, StoreError> {
        split(path)?;
        let Some((bytes, _)) = self.get(path, self.file_key(path))? else { return Ok(None) };
        text_within(path, bytes, max_bytes).map(Some)
    }

    /// etcd's current revision (one count-only read of the prefix's epoch key).
    ///
    /// Errors: etcd unreachable ([`StoreError`], naming the endpoint).
    pub fn revision(&self) -> Result<i64, StoreError> {
        let key = format!("{}/epoch", self.prefix);
        let response = self.run(&key, "read", || {
            let (mut kv, key) = (self.kv(), key.clone());
            async move { kv.get(key, Some(GetOptions::new().with_count_only())).await }
        })?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    /// Opens a watch of `keys` (etcd keys) from now, or only of their deletions with
    /// `deletions_only`; `keys` ending in `/` are prefixes. It returns once etcd acknowledged
    /// every key, so a change made after this call is seen by [`EtcdWatch::wait`], however long
    /// after. A watch from now is one etcd serves at once: one from a past revision that later
    /// writes passed is served by a background loop, up to 100 ms late (etcd's unsynced
    /// watchers), which is why a wait that repeats keeps one open watch rather than opening one
    /// from the revision of its last read.
    ///
    /// Errors: etcd unreachable or refusing the watch, within `timeout`.
    pub fn watch_from_now(&self, keys: &[String], deletions_only: bool, timeout: Duration) -> Result<EtcdWatch<'_>, StoreError> {
        let first = keys.first().cloned().unwrap_or_default();
        let options = |key: &str| {
            let mut options = etcd_client::WatchOptions::new();
            if key.ends_with('/') {
                options = options.with_prefix();
            }
            if deletions_only {
                options = options.with_filters([etcd_client::WatchFilterType::NoPut]);
            }
            options
        };
        let mut client = self.client().watch_client();
        let opened = self.block_on(timeout, async {
            let mut stream = client.watch(first.clone(), Some(options(&first))).await?;
            for key in keys.iter().skip(1) {
                stream.watch(key.clone(), Some(options(key))).await?;
            }
            let mut acknowledged = 0;
            while acknowledged < keys.len() {
                acknowledged += usize::from(next_watch_response(&mut stream).await?.created());
            }
            Ok(stream)
        });
        let stream = watch_outcome(opened, &first, &self.endpoint, timeout)?;
        Ok(EtcdWatch { store: self, stream, key: first })
    }

    /// Creates the record unless it exists (`createPrivateJsonIfAbsent`, §3.3): `Ok(true)` when
    /// created. Missing parent directories are created.
    pub fn create_if_absent(&self, path: &str, content: &str) -> Result<bool, StoreError> {
        let (segments, _) = split(path)?;
        check_size(path, content)?;
        let key = self.file_key(path);
        // One round trip: the record and, nested, each missing directory marker.
        let mut operations = self.marker_operations(&segments);
        operations.push(TxnOp::put(key.clone(), content, None));
        let txn = Txn::new().when(self.fenced(vec![Compare::create_revision(key, CompareOp::Equal, 0)])).and_then(operations);
        let created = self.txn(path, "create", txn)?.0;
        if !created {
            self.check_fence(path)?;
        }
        Ok(created)
    }

    /// The etcd keys `keys` (any under the prefix, records or not), read at one revision in one
    /// transaction: each key's value and revisions, `None` where absent, in `keys`' order; and
    /// the id of the cluster that answered. `path` and `operation` name the read in errors.
    ///
    /// Errors: etcd unreachable.
    pub(crate) fn read_keys<const N: usize>(&self, path: &str, operation: &'static str, keys: [String; N]) -> Result<([Option<etcd_client::KeyValue>; N], u64), StoreError> {
        let txn = Txn::new().and_then(keys.map(|key| TxnOp::get(key, None)));
        let response = self.run(path, operation, || {
            let (mut kv, txn) = (self.kv(), txn.clone());
            async move { kv.txn(txn).await }
        })?;
        let cluster = response.header().map_or(0, |h| h.cluster_id());
        let mut found = response.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        });
        Ok((std::array::from_fn(|_| found.next().flatten()), cluster))
    }

    /// Puts `value` at the etcd key `key` (outside the records: a fencing record) only while
    /// `when` holds, fenced like a record write ([`EtcdStore::fence_with`]); whether it did.
    /// `path` names the record the write belongs to, for errors.
    ///
    /// Errors: etcd unreachable; this process's presence is gone ([`StoreError::Unsafe`]).
    pub(crate) fn put_if(&self, path: &str, when: Vec<Compare>, key: String, value: String) -> Result<bool, StoreError> {
        let txn = Txn::new().when(self.fenced(when)).and_then([TxnOp::put(key, value, None)]);
        let put = self.txn(path, "write", txn)?.0;
        if !put {
            self.check_fence(path)?;
        }
        Ok(put)
    }

    /// Replaces the record only if its bytes hash to `expected_sha256` at the instant of the
    /// write (`writePrivateJsonIfUnchanged`, §3.3): `Ok(false)` when absent or different.
    pub fn replace_if_unchanged(&self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, StoreError> {
        split(path)?;
        check_hash(path, expected_sha256)?;
        check_size(path, content)?;
        self.swap(path, expected_sha256, |key| TxnOp::put(key, content, None))
    }

    /// Removes the record only if its bytes hash to `expected_sha256` at the instant of removal
    /// (`removePrivateStateFileIfUnchanged`, §3.3): `Ok(false)` when absent or different.
    pub fn remove_if_unchanged(&self, path: &str, expected_sha256: &str) -> Result<bool, StoreError> {
        split(path)?;
        check_hash(path, expected_sha256)?;
        self.swap(path, expected_sha256, |key| TxnOp::delete(key, None))
    }

    /// The compare-and-swap of replace and remove: `operation` applies only to the version whose
    /// hash was checked (its mod revision, compared in the same transaction).
    fn swap(&self, path: &str, expected_sha256: &str, operation: impl Fn(String) -> TxnOp) -> Result<bool, StoreError> {
        let key = self.file_key(path);
        for _ in 0..CAS_ATTEMPTS {
            let Some((bytes, revision)) = self.get(path, key.clone())? else { return Ok(false) };
            if digest::sha256_hex(&bytes) != expected_sha256 {
                return Ok(false);
            }
            let txn = Txn::new().when(self.fenced(vec![Compare::mod_revision(key.clone(), CompareOp::Equal, revision)])).and_then([operation(key.clone())]);
            if self.txn(path, "compare-and-swap", txn)?.0 {
                return Ok(true);
            }
            self.check_fence(path)?;
        }
        Err(StoreError::Contended { path: path.into() })
    }

    /// Creates each missing directory of `segments` (its marker key).
    fn ensure(&self, path: &str, segments: &[&str]) -> Result<(), StoreError> {
        self.txn(path, "create directory", Txn::new().and_then(self.marker_operations(segments)))?;
        Ok(())
    }

    /// For each directory of `segments`, a nested transaction that creates its marker if it is
    /// absent (an existing marker, hence the directory's identity, is never rewritten).
    fn marker_operations(&self, segments: &[&str]) -> Vec<TxnOp> {
        (1..=segments.len())
            .map(|depth| {
                let key = self.dir_key(&segments[..depth].join("/"));
                TxnOp::txn(Txn::new().when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)]).and_then([TxnOp::put(key, "", None)]))
            })
            .collect()
    }

    /// The identity of directory `dir` (its marker's create revision), if it exists.
    fn identity(&self, path: &str, dir: &str) -> Result<Option<CollectionIdentity>, StoreError> {
        let key = self.dir_key(dir);
        let response = self.run(path, "read directory", || {
            let (mut kv, key) = (self.kv(), key.clone());
            async move { kv.get(key, None).await }
        })?;
        Ok(response.kvs().first().map(|kv| directory_identity(kv.create_revision())))
    }

    /// Creates each missing directory of `path` and returns the identity of the last
    /// (`ensurePrivateStateDirectory`, §3.3).
    pub fn ensure_private_directory(&self, path: &str) -> Result<CollectionIdentity, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        self.ensure(path, &segments)?;
        self.identity(path, &segments.join("/"))?.ok_or_else(|| StoreError::unsafe_(path, "vanished while created"))
    }

    /// The collection's entries at one revision; `None` when it does not exist
    /// (`snapshotPrivateStateDirectory`, §3.3). Sub-directories are listed with their identity.
    ///
    /// The snapshot's identity names that revision too (device `etcd@REVISION`, inode the
    /// marker's create revision), and [`EtcdStore::read_batch`] reads the files as they were at
    /// it: the reference lists and reads a collection under the catalog lock, so no entry can
    /// vanish between the two, but that lock is one machine's, and another machine's release
    /// between them would turn a listed lease into an absent one — which §6B.3 lists as invalid,
    /// blocking every invocation as "malformed". Read at the snapshot's revision, a listing is
    /// one instant of the cluster, as a listing under the lock is one instant of a disk.
    ///
    /// Errors: more than [`MAX_ENTRIES`] entries; an entry name that is not a safe name.
    pub fn snapshot(&self, path: &str) -> Result<Option<CollectionSnapshot>, StoreError> {
        let segments = path::segments(path).map_err(|reason| StoreError::Refused { path: path.into(), reason })?;
        let dir = segments.join("/");
        let (files, dirs) = (format!("{}/", self.file_key(&dir)), format!("{}/", self.dir_key(&dir)));
        let txn = Txn::new().and_then([
            TxnOp::get(self.dir_key(&dir), None),
            TxnOp::get(files.clone(), Some(GetOptions::new().with_prefix().with_keys_only())),
            TxnOp::get(dirs.clone(), Some(GetOptions::new().with_prefix())),
        ]);
        let (_, responses, revision) = self.txn_at(path, "list", txn)?;
        let ranges: Vec<_> = responses
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            })
            .collect();
        let [marker, file_keys, dir_keys] = ranges.as_slice() else {
            return Err(StoreError::io(path, "list", std::io::Error::other("etcd answered a listing with an unexpected shape")));
        };
        let Some(marker) = marker.kvs().first() else { return Ok(None) };
        let mut entries = Vec::new();
        let child = |key: &[u8], prefix: &str| -> Option<Result<String, StoreError>> {
            let rest = key.strip_prefix(prefix.as_bytes())?;
            if rest.contains(&b'/') {
                return None; // deeper than one level
            }
            Some(
                String::from_utf8(rest.to_vec())
                    .ok()
                    .filter(|name| path::is_safe_name(name))
                    .ok_or_else(|| StoreError::unsafe_(path, format!("state directory contains an unsafe entry name (\"{}\")", rest.escape_ascii()))),
            )
        };
        for kv in file_keys.kvs() {
            if let Some(name) = child(kv.key(), &files) {
                entries.push(CollectionEntry { name: name?, kind: EntryKind::File, identity: None });
            }
        }
        for kv in dir_keys.kvs() {
            if let Some(name) = child(kv.key(), &dirs) {
                entries.push(CollectionEntry { name: name?, kind: EntryKind::Directory, identity: Some(directory_identity(kv.create_revision())) });
            }
        }
        if entries.len() > MAX_ENTRIES {
            return Err(StoreError::unsafe_(path, format!("the collection has more than {MAX_ENTRIES} entries")));
        }
        entries.sort_by(|a, b| proclease_core::js::cmp_utf16(&a.name, &b.name));
        let identity = CollectionIdentity { device: format!("etcd@{revision}"), inode: marker.create_revision().to_string() };
        Ok(Some(CollectionSnapshot { identity, entries }))
    }

    /// Reads files of a collection whose identity must be `expected` (`readPrivateStateFilesBatch`,
    /// §3.3): every file at one revision, in request order — the revision of the snapshot that
    /// gave `expected` ([`EtcdStore::snapshot`]), else the current one.
    ///
    /// Errors: the file store's bounds; the directory absent or no longer `expected`; the
    /// snapshot's revision compacted away by etcd since (list again).
    pub fn read_batch(
        &self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, StoreError> {
        let segments = check_batch(path, names, max_bytes_per_file, max_total_bytes)?;
        let dir = segments.join("/");
        let changed = || StoreError::unsafe_(path, "private state batch directory changed identity");
        let Some((as_of, revision)) = parse_identity(expected) else { return Err(changed()) };
        let options = || as_of.map(|as_of| GetOptions::new().with_revision(as_of));
        let gets: Vec<TxnOp> = names.iter().map(|name| TxnOp::get(self.file_key(&format!("{dir}/{name}")), options())).collect();
        let txn = Txn::new().when([Compare::create_revision(self.dir_key(&dir), CompareOp::Equal, revision)]).and_then(gets);
        let (held, responses) = self.txn(path, "batch read", txn).map_err(|error| match (as_of, &error) {
            (Some(as_of), error) if unavailable_revision(error) => {
                StoreError::unsafe_(path, format!("etcd compacted revision {as_of}, at which the collection was listed, before its files were read; retry"))
            }
            _ => error,
        })?;
        if !held {
            return Err(match self.identity(path, &dir)? {
                None => StoreError::unsafe_(path, "private state batch directory is absent"),
                Some(_) => changed(),
            });
        }
        let mut remaining = u64::from(max_total_bytes);
        let per_file = u64::from(max_bytes_per_file);
        let mut results = Vec::with_capacity(names.len());
        for (name, response) in names.iter().zip(responses) {
            let value = match response {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
                _ => return Err(StoreError::io(path, "batch read", std::io::Error::other("etcd answered a batch read with an unexpected shape"))),
            };
            let status = match value {
                None => BatchStatus::Absent,
                Some(bytes) if bytes.len() as u64 > per_file => BatchStatus::Invalid(BatchInvalid::FileByteBound),
                Some(bytes) if bytes.len() as u64 > remaining => BatchStatus::Invalid(BatchInvalid::AggregateByteBound),
                Some(bytes) => {
                    remaining -= bytes.len() as u64;
                    match String::from_utf8(bytes) {
                        Ok(text) => BatchStatus::Present(text),
                        Err(_) => BatchStatus::Invalid(BatchInvalid::InvalidUtf8),
                    }
                }
            };
            results.push((name.clone(), status));
        }
        Ok(results)
    }
}

/// The identity of a directory whose marker was created at `revision`.
fn directory_identity(revision: i64) -> CollectionIdentity {
    CollectionIdentity { device: "etcd".into(), inode: revision.to_string() }
}

/// A record's bytes as text: at most `max_bytes`, UTF-8.
fn text_within(path: &str, bytes: Vec<u8>, max_bytes: u32) -> Result<String, StoreError> {
    if bytes.len() as u64 > u64::from(max_bytes) {
        return Err(StoreError::unsafe_(path, format!("larger than {max_bytes} bytes")));
    }
    String::from_utf8(bytes).map_err(|_| StoreError::unsafe_(path, "not valid UTF-8"))
}

/// Whether an error says that a revision asked for was compacted away, or is in the future.
/// Whether `error` is etcd refusing a revision it compacted away or has not reached: not an
/// outage (retrying does not help), though [`EtcdStore::run`] reports every failed request
/// alike.
fn unavailable_revision(error: &StoreError) -> bool {
    let words = match error {
        StoreError::Unreachable { message, .. } => message.clone(),
        StoreError::Io { source, .. } => source.to_string(),
        _ => return false,
    };
    words.contains("required revision has been compacted") || words.contains("required revision is a future revision")
}

/// Checks that `path` (a secret: a password or a private key) is a file only its owner may
/// read; `label` names it in the message.
fn check_private_file(path: &std::path::Path, label: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path).map_err(|e| format!("{label} {}: {e}", path.display()))?;
    if metadata.permissions().mode() & 0o077 != 0 {
        return Err(format!("{label} {}: others may read it: chmod 600 it", path.display()));
    }
    Ok(())
}

/// The revision a collection identity was listed at (`None`: an identity from
/// [`EtcdStore::ensure_private_directory`], read at the current revision) and its directory's
/// create revision; `None` for an identity that is not an etcd directory's.
fn parse_identity(identity: &CollectionIdentity) -> Option<(Option<i64>, i64)> {
    let created = identity.inode.parse::<i64>().ok()?;
    match identity.device.strip_prefix("etcd") {
        Some("") => Some((None, created)),
        Some(rest) => Some((Some(rest.strip_prefix('@')?.parse::<i64>().ok().filter(|r| *r > 0)?), created)),
        None => None,
    }
}

/// Whether `operation` (a [`EtcdStore::run`] label) only reads.
fn is_read(operation: &str) -> bool {
    [
        "connecting",
        "read",
        "read directory",
        "list",
        "batch read",
        "checking the cluster presence",
        "reading the cluster epoch",
        "reading etcd's raft index",
        "padding etcd's raft log",
    ]
    .contains(&operation)
}

/// Whether a failed request is known not to have been applied: it never reached a member (the
/// connection to the endpoint the client picked was refused: `tcp connect error`), or etcd
/// refused it before proposing it (`too many requests`); a read, which changes nothing, also
/// when its member was unavailable, lost its leader, or its connection broke or timed out
/// (gRPC UNKNOWN `transport error`, CANCELLED, DEADLINE_EXCEEDED: a member killed or stopped
/// mid-request).
fn not_applied(error: &etcd_client::Error, read: bool) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            // UNKNOWN, CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE
            let broken = matches!(i32::from(status.code()), 1 | 2 | 4 | 14);
            message.contains("tcp connect error") || message.contains("too many requests") || (read && (broken || message.contains("leader changed")))
        }
        etcd_client::Error::TransportError(_) => read,
        _ => false,
    }
}

/// What an authentication or authorization refusal of etcd means for the user (`None` for any
/// other error): wrong credentials, credentials missing where etcd requires them, the prefix
/// not granted to the user, a token that could not be renewed. Never retried.
fn auth_refusal(error: &etcd_client::Error, user: Option<&str>, prefix: &str) -> Option<String> {
    let etcd_client::Error::GRpcStatus(status) = error else { return None };
    let message = status.message();
    let who = user.map_or_else(|| "no user".to_owned(), |user| format!("user {user:?}"));
    if message.contains("authentication is not enabled") {
        Some(format!(
            "etcd has authentication disabled, but credentials were given ({who}): unset {USER_VARIABLE} and the password ({PASSWORD_FILE_VARIABLE}, \
             {PASSWORD_VARIABLE}), or enable authentication in etcd"
        ))
    } else if message.contains("authentication failed") {
        Some(format!("etcd refused the credentials of {who} (authentication failed): check {USER_VARIABLE} and the password in {PASSWORD_FILE_VARIABLE}"))
    } else if message.contains("user name is empty") || (user.is_none() && message.contains("invalid auth token")) {
        Some(format!("this etcd requires authentication: set {USER_VARIABLE} and {PASSWORD_FILE_VARIABLE} (a file, mode 0600, that holds the password)"))
    } else if message.contains("permission denied") {
        Some(format!(
            "etcd denied {who} access to the keys under {prefix}/ (permission denied): grant its role readwrite on them \
             (etcdctl role grant-permission ROLE --prefix=true readwrite {prefix}/)"
        ))
    } else if message.contains("invalid auth token") {
        Some(format!("etcd no longer accepts the authentication token of {who}, and it could not be renewed (etcd says: {message})"))
    } else {
        None
    }
}

/// The client's TLS settings from `files`.
///
/// Errors: a file that cannot be read, or a key file others may read.
/// Errors: a file that cannot be read or holds no PEM block of its kind (an encrypted key
/// included: give it decrypted, mode 0600), a key file others may read, a certificate without
/// its key or the reverse.
fn tls_options(files: &EtcdTlsFiles) -> Result<TlsOptions, String> {
    use crate::cluster::{CA_VARIABLE, CERT_VARIABLE, KEY_VARIABLE};
    let read = |path: &std::path::Path, what: &str, block: &str| -> Result<Vec<u8>, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let found = text.lines().any(|line| line.starts_with("-----BEGIN ") && line.ends_with(&format!("{block}-----")) && !line.contains("ENCRYPTED"));
        if !found {
            return Err(format!("{what} {}: no PEM {block} in it (an encrypted key is not read: give it decrypted, mode 0600)", path.display()));
        }
        Ok(bytes)
    };
    let ca = read(&files.ca, &format!("etcd's CA ({CA_VARIABLE}, --etcd-ca)"), "CERTIFICATE")?;
    let mut options = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            let key_label = format!("etcd client key ({KEY_VARIABLE}, --etcd-key)");
            check_private_file(key, &key_label)?;
            let cert = read(cert, &format!("etcd client certificate ({CERT_VARIABLE}, --etcd-cert)"), "CERTIFICATE")?;
            let key = read(key, &key_label, "PRIVATE KEY")?;
            options = options.identity(Identity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => return Err(format!("give etcd's client certificate and its key together: --etcd-cert and --etcd-key ({CERT_VARIABLE}, {KEY_VARIABLE})")),
    }
    Ok(options)
}

/// What a TLS failure means for the user (`None` for any other error), and whether it is
/// certain: the members' certificates not trusted, a client certificate refused, TLS spoken to
/// a plain-text etcd (certain: never retried) — or, while `connecting`, a connection closed
/// without an answer: without TLS, an etcd that may want it; with TLS and no client certificate
/// (`tls` is `Some(false)`), one that may want a client certificate. A guess is told only once
/// the request's retries are spent (a restarting member closes connections too).
fn tls_refusal(error: &etcd_client::Error, tls: Option<bool>, connecting: bool, endpoint: &str) -> Option<(String, bool)> {
    use crate::cluster::{CA_VARIABLE, CERT_VARIABLE, KEY_VARIABLE};
    use std::error::Error as _;
    let mut words = error.to_string();
    // The client's own error keeps the transport's cause to itself: walk the transport's.
    let mut source = match error {
        etcd_client::Error::TransportError(transport) => transport.source(),
        other => other.source(),
    };
    while let Some(cause) = source {
        words.push_str(": ");
        words.push_str(&cause.to_string());
        source = cause.source();
    }
    let has = |needle: &str| words.to_ascii_lowercase().contains(needle);
    let closed = connecting && (has("connection reset") || has("broken pipe") || has("frame with invalid size") || has("http2 error") || has("protocol error"));
    if let Some(client_certificate) = tls {
        if client_certificate && (has("inconsistentkeys") || has("keymismatch") || has("key mismatch") || has("does not match")) {
            return Some((
                format!(
                    "TLS with etcd at {endpoint} could not start: the key in {KEY_VARIABLE} (--etcd-key) is not the key of the certificate in {CERT_VARIABLE} (--etcd-cert) ({words})"
                ),
                true,
            ));
        }
        if has("tls handshake eof") {
            let or = if client_certificate { "or it did not accept this client certificate" } else { "or it wants a client certificate (--etcd-cert, --etcd-key)" };
            return Some((
                format!(
                    "TLS with etcd at {endpoint} failed: it closed the connection during the handshake: it does not speak TLS there (drop --etcd-ca, \
                     {CA_VARIABLE}, for a plain-text etcd), {or} ({words})"
                ),
                true,
            ));
        }
        let wants_client = has("certificaterequired") || has("certificate required") || has("bad certificate") || has("badcertificate") || has("unknown ca") || has("unknownca");
        if has("unknownissuer") || has("invalid peer certificate") || has("certificate verify") || has("notvalidforname") {
            Some((
                format!(
                    "TLS with etcd at {endpoint} failed: its certificate is not signed by the CA in {CA_VARIABLE} (--etcd-ca), or does not name the \
                     host it is reached at ({words})"
                ),
                true,
            ))
        } else if wants_client || (closed && !client_certificate) {
            let may = if wants_client { "wants" } else { "closed the connection without answering: it may want" };
            Some((
                format!("TLS with etcd at {endpoint} failed: etcd {may} a client certificate it trusts: give {CERT_VARIABLE} and the key (--etcd-cert, --etcd-key) ({words})"),
                wants_client,
            ))
        } else if has("invalidcontenttype") || has("corrupt message") || has("wrong version") || has("received corrupt") {
            Some((format!("TLS with etcd at {endpoint} failed: it does not speak TLS there; drop --etcd-ca ({CA_VARIABLE}) for a plain-text etcd ({words})"), true))
        } else {
            None
        }
    } else if closed {
        Some((
            format!(
                "etcd at {endpoint} closed the connection without answering: if it uses TLS (https client URLs), give the CA that signed its \
                 certificate in --etcd-ca ({CA_VARIABLE}) ({words})"
            ),
            false,
        ))
    } else {
        None
    }
}

fn unreachable_error(path: &str, endpoint: &str, operation: &'static str, reason: &str, bound: Duration) -> StoreError {
    // Only a transaction that writes can have been applied without its answer arriving.
    let outcome = if is_read(operation) { "nothing was changed; retry once etcd answers" } else { "a write may or may not have been applied: read before retrying" };
    StoreError::Unreachable {
        path: path.into(),
        operation,
        message: format!("etcd at {endpoint} is unreachable or did not answer within {} ({reason}); {outcome}", humantime::format_duration(bound)),
    }
}

/// Whether a request that a member did not answer in time is made again to another member: a
/// read, or a lease grant (a lease granted twice expires by itself), never a write.
fn retried_after_silence(operation: &str) -> bool {
    is_read(operation) || operation == "granting a lease"
}

/// The next response of a watch stream that is not an error: etcd cancelling the watch, or
/// closing the stream, are errors (the watch is of no more use).
async fn next_watch_response(stream: &mut etcd_client::WatchStream) -> Result<etcd_client::WatchResponse, etcd_client::Error> {
    match stream.message().await? {
        Some(response) if response.canceled() => Err(etcd_client::Error::WatchError(format!("etcd cancelled the watch: {}", response.cancel_reason()))),
        Some(response) => Ok(response),
        None => Err(etcd_client::Error::WatchError("etcd closed the watch".into())),
    }
}

/// A watch operation's outcome within `timeout` as the store reports it: its value, or an
/// error naming the endpoint and `key` (an etcd error, or no answer in time).
fn watch_outcome<T>(outcome: Option<Result<T, etcd_client::Error>>, key: &str, endpoint: &str, timeout: Duration) -> Result<T, StoreError> {
    match outcome {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(unreachable_error(key, endpoint, "watch", &e.to_string(), timeout)),
        None => Err(unreachable_error(key, endpoint, "watch", "no answer", timeout)),
    }
}

/// An open etcd watch ([`EtcdStore::watch_from_now`]): changes are kept by the stream until
/// [`EtcdWatch::wait`] takes them.
pub struct EtcdWatch<'s> {
    store: &'s EtcdStore,
    stream: etcd_client::WatchStream,
    /// The first key watched, for errors.
    key: String,
}

impl EtcdWatch<'_> {
    /// Also watches `key` (from now): acknowledged before it returns, within `timeout`.
    ///
    /// Errors: etcd unreachable or refusing the watch; the watch is then of no more use.
    pub fn add(&mut self, key: &str, timeout: Duration) -> Result<(), StoreError> {
        let stream = &mut self.stream;
        let added = self.store.block_on(timeout, async {
            stream.watch(key.to_owned(), None).await?;
            loop {
                let response = next_watch_response(stream).await?;
                // A change of a key already watched, arriving meanwhile, also ends this: it is a
                // change the caller would wake for, so the next wait should not sleep.
                if response.created() || !response.events().is_empty() {
                    return Ok(());
                }
            }
        });
        watch_outcome(added, key, &self.store.endpoint, timeout)
    }

    /// Waits for a change of a watched key (`true`), the process of one of the pidfds `exits`
    /// to end (`true`), or `timeout` (`false`).
    ///
    /// Errors: etcd cancelled or closed the watch, or the connection broke: the watch is of no
    /// more use, open another.
    pub fn wait(&mut self, timeout: Duration, exits: &[std::os::fd::BorrowedFd<'_>]) -> Result<bool, StoreError> {
        let stream = &mut self.stream;
        let answer = self.store.block_on(timeout, async {
            // A pidfd is readable once its process has exited. SAFETY: each of `exits` is borrowed
            // for the whole call, and its `AsyncFd` lives only within it.
            let registered: Vec<_> = exits.iter().filter_map(|fd| unsafe { tokio::io::unix::AsyncFd::register_with_interest(*fd, tokio::io::Interest::READABLE) }.ok()).collect();
            let exited =
                std::future::poll_fn(
                    |context| {
                        if registered.iter().any(|fd| fd.poll_read_ready(context).is_ready()) { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
                    },
                );
            let changed = async {
                while next_watch_response(stream).await?.events().is_empty() {}
                Ok(true)
            };
            let (mut exited, mut changed) = (std::pin::pin!(exited), std::pin::pin!(changed));
            std::future::poll_fn(|context| {
                if exited.as_mut().poll(context).is_ready() {
                    return std::task::Poll::Ready(Ok(true));
                }
                changed.as_mut().poll(context)
            })
            .await
        });
        match answer {
            None => Ok(false),
            answer => watch_outcome(answer, &self.key, &self.store.endpoint, timeout),
        }
    }
}

/// The component's `state-store` import served by an [`EtcdStore`].
pub struct SharedEtcdStore(pub std::sync::Arc<EtcdStore>);

impl Store for SharedEtcdStore {
    fn read_if_present(&mut self, path: &str, max_bytes: u32) -> Result<Option<String>, Failure> {
        self.0.read_if_present(path, max_bytes).map_err(failure)
    }

    fn create_if_absent(&mut self, path: &str, content: &str) -> Result<bool, Failure> {
        self.0.create_if_absent(path, content).map_err(failure)
    }

    fn replace_if_unchanged(&mut self, path: &str, expected_sha256: &str, content: &str) -> Result<bool, Failure> {
        self.0.replace_if_unchanged(path, expected_sha256, content).map_err(failure)
    }

    fn remove_if_unchanged(&mut self, path: &str, expected_sha256: &str) -> Result<bool, Failure> {
        self.0.remove_if_unchanged(path, expected_sha256).map_err(failure)
    }

    fn ensure_private_directory(&mut self, path: &str) -> Result<CollectionIdentity, Failure> {
        self.0.ensure_private_directory(path).map_err(failure)
    }

    fn snapshot(&mut self, path: &str, _recover_orphans: bool) -> Result<Option<CollectionSnapshot>, Failure> {
        // Nothing to recover: a transaction leaves no temporaries or claims behind.
        self.0.snapshot(path).map_err(failure)
    }

    fn read_batch(
        &mut self,
        path: &str,
        names: &[String],
        max_bytes_per_file: u32,
        max_total_bytes: u32,
        expected: &CollectionIdentity,
    ) -> Result<Vec<(String, BatchStatus)>, Failure> {
        self.0.read_batch(path, names, max_bytes_per_file, max_total_bytes, expected).map_err(failure)
    }
}
