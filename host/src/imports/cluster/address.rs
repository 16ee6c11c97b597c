//! Where records live (`--store`, `PROCLEASE_STORE`): the state home's file store or a prefix of
//! an etcd cluster, parsed once into a [`StoreAddress`]; the TLS files to reach etcd with; and
//! what cluster mode could not do ([`ClusterError`]). Pure parsing, no connection: available in
//! a build without the feature `cluster`, which refuses an etcd address by name.

use std::time::Duration;

/// The environment variable naming the etcd user of an etcd with authentication.
pub const USER_VARIABLE: &str = "PROCLEASE_ETCD_USER";
/// The environment variable naming a file that holds that user's password (mode 0600 or
/// stricter; one trailing newline is ignored).
pub const PASSWORD_FILE_VARIABLE: &str = "PROCLEASE_ETCD_PASSWORD_FILE";
/// The environment variable holding that user's password, when no file is given.
pub const PASSWORD_VARIABLE: &str = "PROCLEASE_ETCD_PASSWORD";

/// The environment variable bounding how long one etcd member may take to connect, or to answer
/// one attempt of a request, before the request goes to another member (etcdctl's
/// `--dial-timeout`; a duration such as `1s`, `500ms`).
pub const DIAL_TIMEOUT_VARIABLE: &str = "PROCLEASE_ETCD_DIAL_TIMEOUT";
/// The environment variable bounding one store operation across every member and retry
/// (etcdctl's `--command-timeout`).
pub const COMMAND_TIMEOUT_VARIABLE: &str = "PROCLEASE_ETCD_COMMAND_TIMEOUT";

/// How long the etcd client waits (`docs/cluster.md`, "Operator settings"): a member that does
/// not connect or answer within `dial` is passed over for the next (a hung member — stopped,
/// or accepting and never answering — costs one `dial`, not the whole operation), and one
/// operation gives up after `command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdTimeouts {
    /// Per member: connecting, and each attempt of a request (default 1 s).
    pub dial: Duration,
    /// Per operation, every member and retry included (default 5 s).
    pub command: Duration,
}

impl Default for EtcdTimeouts {
    fn default() -> Self {
        EtcdTimeouts { dial: Duration::from_secs(1), command: Duration::from_secs(5) }
    }
}

impl EtcdTimeouts {
    /// The timeouts [`DIAL_TIMEOUT_VARIABLE`] and [`COMMAND_TIMEOUT_VARIABLE`] give, the
    /// defaults for those unset (an empty value is unset).
    ///
    /// Errors: a value that is not a duration, a zero one, or a dial timeout longer than the
    /// command timeout.
    pub fn from_environment() -> Result<EtcdTimeouts, String> {
        let mut timeouts = EtcdTimeouts::default();
        for (variable, field) in [(DIAL_TIMEOUT_VARIABLE, &mut timeouts.dial), (COMMAND_TIMEOUT_VARIABLE, &mut timeouts.command)] {
            if let Some(value) = std::env::var(variable).ok().filter(|v| !v.is_empty()) {
                let parsed = humantime::parse_duration(&value).map_err(|e| format!("{variable}={value:?} is not a duration (e.g. 1s, 500ms): {e}"))?;
                if parsed.is_zero() {
                    return Err(format!("{variable}={value:?}: a timeout must be longer than zero"));
                }
                *field = parsed;
            }
        }
        if timeouts.dial > timeouts.command {
            return Err(format!(
                "the etcd dial timeout ({}) is longer than the command timeout ({}): a request could not try a second member",
                humantime::format_duration(timeouts.dial),
                humantime::format_duration(timeouts.command)
            ));
        }
        Ok(timeouts)
    }
}

/// The password [`take_password_from_environment`] took out of this process's environment.
static TAKEN_PASSWORD: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Takes [`PASSWORD_VARIABLE`] out of this process's environment, keeping its value for the
/// etcd credentials ([`password_from_environment`]): the variable is removed, and its bytes in
/// the environment block the kernel shows as `/proc/PID/environ` are overwritten with zeros.
/// A process that never execs — the init of a command's box, forked from its supervisor — keeps
/// a copy of that block, which the command could read as `/proc/1/environ` (#45 case 7). The
/// `proclease` command calls it first thing; a library that runs commands should too (or pass
/// the password in a file, [`PASSWORD_FILE_VARIABLE`]).
///
/// # Safety
/// As [`std::env::remove_var`]: no other thread may read or write the environment meanwhile
/// (call it before starting threads).
pub unsafe fn take_password_from_environment() {
    let Some(value) = std::env::var_os(PASSWORD_VARIABLE) else { return };
    let _ = TAKEN_PASSWORD.set(value.to_string_lossy().into_owned());
    let prefix = format!("{PASSWORD_VARIABLE}=");
    // SAFETY: `environ` is the C library's NUL-terminated array of NUL-terminated strings; the
    // caller guarantees no thread changes it meanwhile. Each matching entry's value is
    // overwritten in place, within its own length.
    unsafe {
        let mut entry = libc::environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = std::ffi::CStr::from_ptr(*entry);
            if text.to_bytes().starts_with(prefix.as_bytes()) {
                let length = text.to_bytes().len();
                for offset in prefix.len()..length {
                    std::ptr::write_volatile((*entry).add(offset), 0);
                }
            }
            entry = entry.add(1);
        }
        std::env::remove_var(PASSWORD_VARIABLE);
    }
}

/// The password for etcd from the environment: [`PASSWORD_VARIABLE`], or what
/// [`take_password_from_environment`] took out of it. Empty counts as unset.
pub fn password_from_environment() -> Option<String> {
    std::env::var(PASSWORD_VARIABLE).ok().filter(|v| !v.is_empty()).or_else(|| TAKEN_PASSWORD.get().cloned())
}

/// The environment variable that selects the store when none is given
/// ([`HostBuilder::store`](crate::HostBuilder::store)): `etcd://HOST:PORT/PREFIX`, or `file`.
pub const STORE_VARIABLE: &str = "PROCLEASE_STORE";

/// The environment variable naming the PEM file of the certificate authority that signed the
/// etcd members' certificates: set, the client speaks TLS to every endpoint (`--etcd-ca`).
pub const CA_VARIABLE: &str = "PROCLEASE_ETCD_CA";
/// The environment variable naming this machine's client certificate (PEM), for an etcd that
/// requires client certificates (`--etcd-cert`; with [`KEY_VARIABLE`]).
pub const CERT_VARIABLE: &str = "PROCLEASE_ETCD_CERT";
/// The environment variable naming the client certificate's private key (PEM, mode 0600 or
/// stricter; `--etcd-key`).
pub const KEY_VARIABLE: &str = "PROCLEASE_ETCD_KEY";

/// TLS to etcd: the files of the certificate authority that signed the members' certificates
/// (every endpoint's certificate must name the host it is reached at), and optionally this
/// machine's client certificate and key (etcd's `--client-cert-auth`). Paths only: the files
/// are read when the store connects.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EtcdTlsFiles {
    /// The certificate authority (PEM).
    pub ca: std::path::PathBuf,
    /// The client certificate (PEM), if etcd asks for one.
    pub cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM), with `cert`.
    pub key: Option<std::path::PathBuf>,
}

impl EtcdTlsFiles {
    /// The files [`CA_VARIABLE`], [`CERT_VARIABLE`] and [`KEY_VARIABLE`] name; `None` when no CA
    /// is set (plain text).
    ///
    /// Errors: a certificate or key without a CA, or a certificate without its key (or the
    /// reverse).
    pub fn from_environment() -> Result<Option<EtcdTlsFiles>, String> {
        let variable = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
        EtcdTlsFiles::from_parts(variable(CA_VARIABLE), variable(CERT_VARIABLE), variable(KEY_VARIABLE))
    }

    /// TLS files from optional parts (flags or variables): `None` without any.
    ///
    /// Errors: as [`EtcdTlsFiles::from_environment`].
    pub fn from_parts(ca: Option<std::path::PathBuf>, cert: Option<std::path::PathBuf>, key: Option<std::path::PathBuf>) -> Result<Option<EtcdTlsFiles>, String> {
        match (ca, cert, key) {
            (None, None, None) => Ok(None),
            (None, _, _) => Err(format!("a client certificate or key for etcd is set but no CA: give --etcd-ca (or {CA_VARIABLE}) too")),
            (Some(_), Some(_), None) | (Some(_), None, Some(_)) => {
                Err(format!("give etcd's client certificate and its key together: --etcd-cert and --etcd-key ({CERT_VARIABLE}, {KEY_VARIABLE})"))
            }
            (Some(ca), cert, key) => Ok(Some(EtcdTlsFiles { ca, cert, key })),
        }
    }
}

/// What cluster mode could not do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The store address is neither `file` nor a well-formed `etcd://HOST:PORT/PREFIX`.
    #[error("{address}: {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// What is wrong, and the expected shape.
        reason: String,
    },
    /// An etcd store was asked for, and this build has no etcd client (feature `cluster`).
    /// Nothing falls back to the local store: machines sharing an admission through etcd must
    /// never have one of them decide alone.
    #[error(
        "{address}: this proclease was built without cluster support: enable its feature `cluster` (on by default; \
         a build with `default-features = false` must name it), or unset {STORE_VARIABLE} / give --store file for this machine's state home alone"
    )]
    NotBuilt {
        /// The address asked for.
        address: String,
    },
    /// This process was silent past its presence's TTL (it was stopped — SIGSTOP, a debugger,
    /// a frozen cgroup — or the machine was suspended), or etcd expired its presence: another
    /// machine may already have taken over while its command still ran. The command was killed
    /// at once.
    #[error(
        "cluster session overran: this process acknowledged no renewal of its presence at etcd {endpoint} for {} (past its TTL of {}: \
         it was stopped or suspended, or etcd expired it), so another machine may have taken over its leases while the command still ran; \
         the command was killed; check the work it did",
        humantime::format_duration(*silent),
        humantime::format_duration(*ttl)
    )]
    SessionOverran {
        /// `HOST:PORT`.
        endpoint: String,
        /// How long no renewal was acknowledged (rounded to ms).
        silent: Duration,
        /// The session's TTL.
        ttl: Duration,
    },
    /// etcd answered this process's presence renewal in a way that shows the cluster lost its
    /// state (wiped, restored from a backup, replaced by another cluster) or the presence: the
    /// command was killed at once, since another machine may already act on its leases.
    #[error(
        "cluster state lost: {reason} (etcd at {endpoint}); the command was killed at once, since another machine may already \
         hold its leases: check the work it did"
    )]
    StateLost {
        /// `HOST:PORT`.
        endpoint: String,
        /// What etcd answered ([`crate::cluster::presence::PresenceSession::lost`]).
        reason: String,
    },
    /// This process's presence in etcd lapsed (etcd did not acknowledge a renewal for three
    /// quarters of its TTL): another machine may soon take over its leases, so it stopped its
    /// command and writes nothing more.
    #[error(
        "cluster session lost: etcd at {endpoint} acknowledged no renewal of this process's presence for {}; \
         the command was stopped before another machine could take over its leases ({what})",
        humantime::format_duration(*silent)
    )]
    SessionLost {
        /// `HOST:PORT`.
        endpoint: String,
        /// Three quarters of the session's TTL.
        silent: Duration,
        /// What became of the command.
        what: String,
    },
}

/// `address` with the user information of its authority (`user:password@`) replaced by `***@`,
/// when it has any: the form every message shows. `None` for an address without credentials.
pub fn without_credentials(address: &str) -> Option<String> {
    // Everything up to the last `@` (a password may hold `/` or `@`; hosts and prefixes never
    // hold `@`).
    let (scheme, rest) = address.split_once("://")?;
    let (_, after) = rest.rsplit_once('@')?;
    Some(format!("{scheme}://***@{after}"))
}

/// Where records live: a state home's file store, or a prefix of an etcd cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreAddress {
    /// The state home alone (the default).
    #[default]
    File,
    /// `etcd://HOST:PORT[,HOST:PORT…]/PREFIX`: the admission and invocation leases in etcd.
    Etcd(EtcdAddress),
}

impl StoreAddress {
    /// Parses `file` or `etcd://HOST:PORT[,HOST:PORT…]/PREFIX` (several endpoints of one
    /// cluster, as etcdctl's `--endpoints`).
    ///
    /// Errors: [`ClusterError::Address`] (the expected shapes in the message); an address with
    /// `user:password@` is refused, and shown with `***@` instead.
    pub fn parse(address: &str) -> Result<StoreAddress, ClusterError> {
        if address == "file" {
            return Ok(StoreAddress::File);
        }
        if let Some(shown) = without_credentials(address) {
            return Err(ClusterError::Address {
                address: shown,
                reason: "credentials do not go in the address (process listings, logs and messages would show them): \
                         give the user in PROCLEASE_ETCD_USER and the password in a file named by PROCLEASE_ETCD_PASSWORD_FILE"
                    .into(),
            });
        }
        if !address.starts_with("etcd://") {
            return Err(ClusterError::Address {
                address: address.into(),
                reason: "expected `file` (the state home) or etcd://HOST:PORT/PREFIX, e.g. etcd://127.0.0.1:2379/proclease".into(),
            });
        }
        EtcdAddress::parse(address).map(StoreAddress::Etcd).map_err(|reason| ClusterError::Address { address: address.into(), reason })
    }

    /// The address [`STORE_VARIABLE`] selects (`File` when it is unset or empty).
    ///
    /// Errors: as [`StoreAddress::parse`].
    pub fn from_environment() -> Result<StoreAddress, ClusterError> {
        match std::env::var(STORE_VARIABLE) {
            Ok(value) if !value.is_empty() => StoreAddress::parse(&value),
            _ => Ok(StoreAddress::File),
        }
    }
}

/// Where an `etcd://HOST:PORT[,HOST:PORT…]/PREFIX` address points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdAddress {
    /// The endpoints as given, comma-separated (`HOST:PORT,HOST:PORT`: etcdctl's
    /// `--endpoints` form, for messages).
    pub endpoint: String,
    /// Each `HOST:PORT`, in the order given.
    pub endpoints: Vec<String>,
    /// The key prefix, with its leading `/` (`/PREFIX`).
    pub prefix: String,
}

impl EtcdAddress {
    /// Parses `etcd://HOST:PORT[,HOST:PORT…]/PREFIX`: one or more endpoints of one cluster
    /// (the client balances requests over those that answer and fails over when a member
    /// dies). PREFIX is one or more `/`-separated safe names (letters, digits, `.`, `_`, `-`),
    /// so that no two stores' keys overlap by accident.
    ///
    /// Errors: a message saying what is wrong and the expected shape, without the address
    /// (the caller names it, as [`without_credentials`] shows it: the reason never holds a
    /// password).
    pub fn parse(url: &str) -> Result<EtcdAddress, String> {
        let shape = "expected etcd://HOST:PORT[,HOST:PORT…]/PREFIX, e.g. etcd://127.0.0.1:2379/proclease";
        if without_credentials(url).is_some() {
            return Err(format!("credentials do not go in the address: give them in {USER_VARIABLE} and {PASSWORD_FILE_VARIABLE}"));
        }
        let rest = url.strip_prefix("etcd://").ok_or_else(|| format!("not an etcd address ({shape})"))?;
        let (endpoint, prefix) = rest.split_once('/').ok_or_else(|| format!("no key prefix ({shape})"))?;
        let endpoints: Vec<String> = endpoint.split(',').map(str::to_owned).collect();
        let port_ok = |endpoint: &String| endpoint.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if let Some(bad) = endpoints.iter().find(|e| !port_ok(e)) {
            return Err(format!("HOST:PORT {bad:?} is malformed ({shape})"));
        }
        let safe = |segment: &str| !segment.is_empty() && segment != "." && segment != ".." && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !prefix.split('/').all(safe) {
            return Err(format!("the key prefix must be safe names separated by / ({shape})"));
        }
        Ok(EtcdAddress { endpoint: endpoint.into(), endpoints, prefix: format!("/{prefix}") })
    }

    /// The address as `etcd://HOST:PORT[,HOST:PORT…]/PREFIX` (never with credentials: a parsed
    /// address has none).
    pub fn url(&self) -> String {
        format!("etcd://{}{}", self.endpoint, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_parsed_once_into_its_parts_and_shown_without_credentials() {
        let parsed = StoreAddress::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/fleet/a").expect("an etcd address");
        let StoreAddress::Etcd(address) = parsed else { panic!("etcd: {parsed:?}") };
        assert_eq!(address.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!((address.endpoint.as_str(), address.prefix.as_str()), ("10.0.0.1:2379,10.0.0.2:2379", "/fleet/a"));
        assert_eq!(address.url(), "etcd://10.0.0.1:2379,10.0.0.2:2379/fleet/a", "the url it was parsed from");
        assert_eq!(StoreAddress::parse("file"), Ok(StoreAddress::File));
        for (bad, says) in [
            ("etcd://10.1.1.1:2379", "no key prefix"),
            ("etcd://127.0.0.1:0/p", "is malformed"),
            ("etcd://127.0.0.1:2379/../p", "safe names"),
            ("http://127.0.0.1:2379/p", "expected `file`"),
        ] {
            let error = StoreAddress::parse(bad).expect_err(bad).to_string();
            assert!(error.contains(says), "{bad}: {error}");
            assert_eq!(error.matches(bad).count(), 1, "the address is named once: {error}");
        }
        let error = StoreAddress::parse("etcd://root:s3cret@127.0.0.1:2379/p").expect_err("credentials").to_string();
        assert!(error.starts_with("etcd://***@127.0.0.1:2379/p: credentials do not go in the address"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }
}
