//! A real etcd for the cluster tests (feature `cluster`): Debian's etcd-server started on free
//! loopback ports with a temporary data directory, killed when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proclease::state_store::etcd::{EtcdStore, EtcdTlsFiles};

/// A running etcd, stopped (SIGKILL) when dropped.
pub struct Etcd {
    child: Child,
    dir: tempfile::TempDir,
    /// The port clients connect to.
    pub client_port: u16,
    peer_port: u16,
    /// With TLS on its client port: the certificates ([`Etcd::start_tls`]).
    pub tls: Option<TlsFiles>,
}

/// Certificates made for a TLS etcd by `openssl`: a CA, the server's certificate for
/// 127.0.0.1 signed by it, a client certificate signed by it, and a second CA that signed
/// nothing etcd has.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server's and the client's certificates.
    pub ca: std::path::PathBuf,
    /// The client certificate and its key (mode 0600).
    pub client_cert: std::path::PathBuf,
    /// The client certificate's key.
    pub client_key: std::path::PathBuf,
    /// Another CA.
    pub other_ca: std::path::PathBuf,
    server_cert: std::path::PathBuf,
    server_key: std::path::PathBuf,
}

impl TlsFiles {
    /// A private key that is not the client certificate's (the server's), for a mismatch.
    pub fn mismatched_key(&self) -> std::path::PathBuf {
        self.server_key.clone()
    }

    /// What a client that trusts the CA and presents its certificate uses.
    pub fn client(&self) -> EtcdTlsFiles {
        EtcdTlsFiles { ca: self.ca.clone(), cert: Some(self.client_cert.clone()), key: Some(self.client_key.clone()) }
    }

    /// Makes them in `dir` with `openssl`; `None` when it is not installed (after saying so,
    /// and failing when etcd is required).
    fn make(dir: &std::path::Path) -> Option<TlsFiles> {
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output();
            match out {
                Ok(out) if out.status.success() => true,
                Ok(out) => panic!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)),
                Err(_) => false,
            }
        };
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for (name, subject) in [("ca", "/CN=proclease test CA"), ("other-ca", "/CN=another CA")] {
            let (keyout, out) = (format!("{name}.key"), format!("{name}.pem"));
            let args = [&["req", "-x509"][..], &key, &["-keyout", &keyout, "-out", &out, "-days", "2", "-subj", subject]].concat();
            if !openssl(&args) {
                assert!(
                    std::env::var_os("PROCLEASE_REQUIRE_ETCD").is_none_or(|v| v != "1"),
                    "PROCLEASE_REQUIRE_ETCD=1 but no openssl to make certificates: install Debian's openssl"
                );
                eprintln!("SKIPPED: no openssl to make the TLS etcd's certificates");
                return None;
            }
        }
        for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let (keyout, csr, out, ext) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("{name}.ext"));
            std::fs::write(dir.join(&ext), format!("subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")).expect("extensions");
            let subject = format!("/CN=proclease test {name}");
            let request = [&["req"][..], &key, &["-keyout", &keyout, "-out", &csr, "-subj", &subject]].concat();
            openssl(&request);
            openssl(&["x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", &out, "-days", "2", "-extfile", &ext]);
        }
        use std::os::unix::fs::PermissionsExt as _;
        for key in ["ca.key", "other-ca.key", "server.key", "client.key"] {
            std::fs::set_permissions(dir.join(key), std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        Some(TlsFiles {
            ca: dir.join("ca.pem"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            other_ca: dir.join("other-ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
        })
    }
}

/// Whether `etcdctl` (Debian's etcd-client) is installed, for the tests that back up, restore
/// or compact etcd; when not, says so and fails if etcd is required (`PROCLEASE_REQUIRE_ETCD=1`).
/// A directory for a test etcd's data: on tmpfs (`/dev/shm`) where there is one, so that etcd's
/// fsyncs cost nothing. On a shared disk an fsync can stall for seconds while another test
/// compacts or writes, and an etcd that answers nothing for longer than a presence's TTL makes
/// the machines under test lose their sessions — a fault of the test bed, not of proclease.
/// What the tests check of etcd's durability (wipes, restores from a snapshot) does not depend on
/// where its data lives.
fn data_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new().prefix("proclease-etcd-").tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("data dir")
}

pub fn etcdctl_installed() -> bool {
    let installed = Command::new("etcdctl").arg("version").env("ETCDCTL_API", "3").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !installed {
        assert!(std::env::var_os("PROCLEASE_REQUIRE_ETCD").is_none_or(|v| v != "1"), "PROCLEASE_REQUIRE_ETCD=1 but no etcdctl: install Debian's etcd-client");
        eprintln!("SKIPPED: no etcdctl (install Debian's etcd-client) to back up, restore or compact etcd");
    }
    installed
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Whether an `etcd` binary is installed; when not, says so and fails if etcd is required
/// (`PROCLEASE_REQUIRE_ETCD=1`).
fn installed() -> bool {
    let installed = Command::new("etcd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !installed {
        assert!(std::env::var_os("PROCLEASE_REQUIRE_ETCD").is_none_or(|v| v != "1"), "PROCLEASE_REQUIRE_ETCD=1 but no etcd binary: install Debian's etcd-server");
        eprintln!("SKIPPED: no etcd binary (install Debian's etcd-server, or set PROCLEASE_REQUIRE_ETCD=1 to fail instead)");
    }
    installed
}

impl Etcd {
    /// Starts one, or `None` (after saying why) when no `etcd` binary is installed and etcd is not
    /// required.
    pub fn start() -> Option<Etcd> {
        if !installed() {
            return None;
        }
        let dir = data_dir();
        let (client_port, peer_port) = (free_port(), free_port());
        let child = Etcd::launch(&dir, client_port, peer_port, None);
        let etcd = Etcd { child, dir, client_port, peer_port, tls: None };
        etcd.wait_until_it_answers();
        Some(etcd)
    }

    /// Starts one that speaks TLS on its client port only, with certificates made by
    /// `openssl` ([`TlsFiles`]) and requiring a client certificate signed by its CA
    /// (`--client-cert-auth`); `None` as [`Etcd::start`], or without `openssl`.
    pub fn start_tls() -> Option<Etcd> {
        if !installed() {
            return None;
        }
        let dir = data_dir();
        let tls = TlsFiles::make(dir.path())?;
        let (client_port, peer_port) = (free_port(), free_port());
        let child = Etcd::launch(&dir, client_port, peer_port, Some(&tls));
        let etcd = Etcd { child, dir, client_port, peer_port, tls: Some(tls) };
        etcd.wait_until_it_answers();
        Some(etcd)
    }

    /// Kills it and starts it again on an empty data directory (same name, ports and cluster
    /// configuration, so the same cluster id): etcd's state is lost, as an operator who wipes a
    /// member's data loses it.
    pub fn wipe(&mut self) {
        self.kill();
        std::fs::remove_dir_all(self.dir.path().join("data")).expect("remove etcd's data");
        self.restart();
    }

    /// Saves a snapshot of its data to `file` (`etcdctl snapshot save`, the backup of etcd's
    /// disaster-recovery runbook). Needs [`etcdctl_installed`].
    pub fn snapshot(&self, file: &std::path::Path) {
        let endpoint = format!("127.0.0.1:{}", self.client_port);
        let out = Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "snapshot", "save"]).arg(file).output().expect("etcdctl runs");
        assert!(out.status.success(), "etcdctl snapshot save: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Kills it and restores `file` ([`Etcd::snapshot`]) into its data directory with the same
    /// name, peer address and cluster token (`etcdctl snapshot restore`): the same cluster id
    /// and member id, the revisions of the backup, a new raft log. Then starts it again.
    pub fn restore(&mut self, file: &std::path::Path) {
        self.kill();
        let data = self.dir.path().join("data");
        std::fs::remove_dir_all(&data).expect("remove etcd's data");
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(file)
            .args(["--name", "proclease-test", "--data-dir"])
            .arg(&data)
            .args(["--initial-cluster", &format!("proclease-test={peer}"), "--initial-advertise-peer-urls", &peer])
            .output()
            .expect("etcdctl runs");
        assert!(out.status.success(), "etcdctl snapshot restore: {}", String::from_utf8_lossy(&out.stderr));
        self.restart();
    }

    /// Compacts its history up to its current revision with `etcdctl compact --physical` (what
    /// auto-compaction, or a Kubernetes API server sharing the etcd, does every few minutes);
    /// returns that revision. Needs [`etcdctl_installed`].
    pub fn compact(&self) -> i64 {
        let revision = self.store("compaction").revision().expect("etcd answers");
        let endpoint = format!("127.0.0.1:{}", self.client_port);
        let out = Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "compact", &revision.to_string(), "--physical"]).output().expect("etcdctl runs");
        assert!(out.status.success(), "etcdctl compact: {}", String::from_utf8_lossy(&out.stderr));
        revision
    }

    /// Turns authentication on: a `root` user (password `r00t-pw`), and `user` with `password`
    /// granted read and write on the keys of `prefix` (`/PREFIX/…`), through the JSON gateway.
    pub fn enable_auth(&self, user: &str, password: &str, prefix: &str) {
        let grant = serde_json::json!({"name": user, "perm": {"permType": "READWRITE", "key": format!("/{prefix}/"), "range_end": format!("/{prefix}0")}});
        for (call, body) in [
            ("auth/user/add", serde_json::json!({"name": "root", "password": "r00t-pw"})),
            ("auth/role/add", serde_json::json!({"name": "root"})),
            ("auth/user/grant", serde_json::json!({"user": "root", "role": "root"})),
            ("auth/user/add", serde_json::json!({"name": user, "password": password})),
            ("auth/role/add", serde_json::json!({"name": user})),
            ("auth/role/grant", grant),
            ("auth/user/grant", serde_json::json!({"user": user, "role": user})),
            ("auth/enable", serde_json::json!({})),
        ] {
            let answer = gateway(self.client_port, call, &body.to_string(), None);
            assert!(answer.get("error").is_none() && answer.get("header").is_some(), "{call}: {answer}");
        }
    }

    /// Starts (again) the etcd of this data directory and ports.
    pub fn restart(&mut self) {
        self.child = Etcd::launch(&self.dir, self.client_port, self.peer_port, self.tls.as_ref());
        self.wait_until_it_answers();
    }

    fn launch(dir: &tempfile::TempDir, client_port: u16, peer_port: u16, tls: Option<&TlsFiles>) -> Child {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let (client, peer) = (format!("{scheme}://127.0.0.1:{client_port}"), format!("http://127.0.0.1:{peer_port}"));
        let mut command = Command::new("etcd");
        command
            .args(["--name", "proclease-test", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("proclease-test={peer}"), "--log-level", "error"]);
        if let Some(tls) = tls {
            command.arg("--cert-file").arg(&tls.server_cert).arg("--key-file").arg(&tls.server_key);
            command.arg("--trusted-ca-file").arg(&tls.ca).arg("--client-cert-auth");
        }
        command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("etcd starts")
    }

    fn wait_until_it_answers(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let tls = self.tls.as_ref().map(TlsFiles::client);
        while EtcdStore::connect_with(&self.url("ready"), None, tls.as_ref()).is_err() {
            assert!(Instant::now() < deadline, "etcd did not answer on port {} within 20 s", self.client_port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcd://127.0.0.1:<port>/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.client_port)
    }

    /// A store on `prefix` (over TLS, with the client certificate, for a TLS etcd).
    pub fn store(&self, prefix: &str) -> EtcdStore {
        let tls = self.tls.as_ref().map(TlsFiles::client);
        EtcdStore::connect_with(&self.url(prefix), None, tls.as_ref()).expect("connects")
    }

    /// Kills it (SIGKILL) and reaps it; [`Etcd::restart`] starts it again on the same data.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`-STOP`, `-CONT`, …) with kill(1); a `-STOP` returns once every thread
    /// of etcd is stopped ([`send_signal`]).
    pub fn signal(&self, signal: &str) {
        send_signal(self.child.id(), signal);
    }
}

/// Sends `signal` to process `pid` with kill(1). A stop signal returns only once every thread of
/// the process is stopped: kill(2) returns when the signal is queued, and a thread running on
/// another core can still answer a request for a moment (a CI run saw a write succeed against a
/// just-stopped etcd).
fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("kill runs");
    assert!(status.success(), "kill {signal}");
    if signal != "-STOP" {
        return;
    }
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
        tasks.flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            stat.rsplit_once(')').is_none_or(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('T' | 't' | 'Z' | 'X') | None))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !stopped() {
        assert!(std::time::Instant::now() < deadline, "process {pid} did not stop within 5 s of {signal}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real etcd cluster of several members on loopback (each its own process and data
/// directory), killed when dropped.
pub struct EtcdCluster {
    members: Vec<Option<Child>>,
    dir: tempfile::TempDir,
    /// Each member's (client, peer) port, in member order.
    ports: Vec<(u16, u16)>,
    /// Each member's client port, in member order.
    pub client_ports: Vec<u16>,
}

impl EtcdCluster {
    /// Starts `size` members that form one cluster, or `None` (after saying why) as
    /// [`Etcd::start`].
    pub fn start(size: usize) -> Option<EtcdCluster> {
        if !installed() {
            return None;
        }
        let dir = data_dir();
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (free_port(), free_port())).collect();
        let client_ports = ports.iter().map(|(client, _)| *client).collect();
        let mut cluster = EtcdCluster { members: (0..size).map(|_| None).collect(), dir, ports, client_ports };
        cluster.launch_all();
        Some(cluster)
    }

    /// Starts every member that is not running and waits until each answers (a leader is
    /// elected).
    fn launch_all(&mut self) {
        for index in 0..self.members.len() {
            if self.members[index].is_none() {
                self.members[index] = Some(self.launch(index));
            }
        }
        for index in 0..self.members.len() {
            self.wait_until_it_answers(index);
        }
    }

    /// Member `index`'s etcd, on its data directory: a member with data rejoins its cluster, one
    /// without forms it anew with the others (same names, peers and token, so the same cluster
    /// id).
    fn launch(&self, index: usize) -> Child {
        let initial: Vec<String> = self.ports.iter().enumerate().map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}")).collect();
        let (client, peer) = self.ports[index];
        let (client, peer) = (format!("http://127.0.0.1:{client}"), format!("http://127.0.0.1:{peer}"));
        Command::new("etcd")
            .args(["--name", &format!("m{index}"), "--data-dir"])
            .arg(self.dir.path().join(format!("m{index}")))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new", "--initial-cluster-token", "proclease-test"])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts")
    }

    fn wait_until_it_answers(&self, index: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = self.client_ports[index];
        while EtcdStore::connect(&format!("etcd://127.0.0.1:{port}/ready")).is_err() {
            assert!(Instant::now() < deadline, "etcd member {index} did not answer within 30 s (no leader elected?)");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcd://127.0.0.1:<port>,…/<prefix>` over every member.
    pub fn url(&self, prefix: &str) -> String {
        let endpoints: Vec<String> = self.client_ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
        format!("etcd://{}/{prefix}", endpoints.join(","))
    }

    /// A store on `prefix` over every member.
    pub fn store(&self, prefix: &str) -> EtcdStore {
        EtcdStore::connect(&self.url(prefix)).expect("connects")
    }

    /// Kills member `index` (SIGKILL) and reaps it.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `index` again on its data (after [`EtcdCluster::kill`]) and waits until it
    /// answers.
    pub fn restart(&mut self, index: usize) {
        self.kill(index);
        self.members[index] = Some(self.launch(index));
        self.wait_until_it_answers(index);
    }

    /// Kills every member and starts them again on empty data directories: the cluster keeps its
    /// id and addresses but loses every key, and its revisions start again from 1 — as when an
    /// operator wipes the cluster or restores it from a backup taken before it was used.
    pub fn wipe(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
            let data = self.dir.path().join(format!("m{index}"));
            if data.exists() {
                std::fs::remove_dir_all(&data).expect("remove a member's data");
            }
        }
        self.launch_all();
    }

    /// Saves a snapshot of the cluster's data to `file` (`etcdctl snapshot save` from member
    /// 0, or the first member that answers). Needs [`etcdctl_installed`].
    pub fn snapshot(&self, file: &std::path::Path) {
        let mut last = String::new();
        for port in &self.client_ports {
            let out =
                Command::new("etcdctl").env("ETCDCTL_API", "3").args(["--endpoints", &format!("127.0.0.1:{port}"), "snapshot", "save"]).arg(file).output().expect("etcdctl runs");
            if out.status.success() {
                return;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
        }
        panic!("etcdctl snapshot save: no member saved one: {last}");
    }

    /// Kills every member and restores `file` into each one's data directory with its name,
    /// peer address, the cluster's members and token (`etcdctl snapshot restore`, the runbook's
    /// way): the same cluster id and member ids, the revisions of the backup, a new raft log.
    /// Then starts them again.
    pub fn restore(&mut self, file: &std::path::Path) {
        let initial: Vec<String> = self.ports.iter().enumerate().map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}")).collect();
        for index in 0..self.members.len() {
            self.kill(index);
            let data = self.dir.path().join(format!("m{index}"));
            if data.exists() {
                std::fs::remove_dir_all(&data).expect("remove a member's data");
            }
            let peer = format!("http://127.0.0.1:{}", self.ports[index].1);
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(file)
                .args(["--name", &format!("m{index}"), "--data-dir"])
                .arg(&data)
                .args(["--initial-cluster", &initial.join(","), "--initial-cluster-token", "proclease-test", "--initial-advertise-peer-urls", &peer])
                .output()
                .expect("etcdctl runs");
            assert!(out.status.success(), "etcdctl snapshot restore: {}", String::from_utf8_lossy(&out.stderr));
        }
        self.launch_all();
    }

    /// Sends `signal` (`-STOP`, `-CONT`, …) to member `index` with kill(1).
    pub fn signal(&self, index: usize, signal: &str) {
        let child = self.members[index].as_ref().expect("the member runs");
        send_signal(child.id(), signal);
    }

    /// The member that leads, as the members answering `maintenance/status` say (asks only
    /// members that run; a stopped member would not answer).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len()).filter(|&i| self.members[i].is_some()).find(|&i| {
            let status = gateway(self.client_ports[i], "maintenance/status", "{}", None);
            status["leader"].is_string() && status["leader"] == status["header"]["member_id"]
        })
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}

/// Calls etcd's JSON gateway (`/v3/…`) with Python's standard library (no etcdctl on these
/// machines): the tests set up users, roles and authentication with it and ask members who
/// leads. `token`: an auth token. A permission's `key` and `range_end` are given as text (the
/// script encodes them).
pub fn gateway(port: u16, call: &str, body: &str, token: Option<&str>) -> serde_json::Value {
    let script = r#"
import base64, json, sys, urllib.request
port, call, body, token = sys.argv[1:5]
data = json.loads(body)
for field in ("key", "range_end"):
    if field in data.get("perm", {}):
        data["perm"][field] = base64.b64encode(data["perm"][field].encode()).decode()
body = json.dumps(data)
request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/{call}", data=body.encode(), method="POST")
if token:
    request.add_header("Authorization", token)
try:
    print(urllib.request.urlopen(request, timeout=10).read().decode())
except urllib.error.HTTPError as e:
    print(e.read().decode())
"#;
    let out = Command::new("python3").args(["-c", script, &port.to_string(), call, body, token.unwrap_or("")]).output().expect("python3");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{call}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}
