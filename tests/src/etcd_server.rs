//! A real etcd for the cluster tests (feature `cluster`): Debian's etcd-server started on free
//! loopback ports with a temporary data directory, killed when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proclease::state_store::etcd::EtcdStore;

/// A running etcd, stopped (SIGKILL) when dropped.
pub struct Etcd {
    child: Child,
    dir: tempfile::TempDir,
    /// The port clients connect to.
    pub client_port: u16,
    peer_port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Whether an `etcd` binary is installed; when not, says so and fails if etcd is required
/// (`PROCLEASE_REQUIRE_ETCD=1`).
fn installed() -> bool {
    let installed = Command::new("etcd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !installed {
        assert!(
            std::env::var_os("PROCLEASE_REQUIRE_ETCD").is_none_or(|v| v != "1"),
            "PROCLEASE_REQUIRE_ETCD=1 but no etcd binary: install Debian's etcd-server"
        );
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
        let dir = tempfile::tempdir().expect("data dir");
        let (client_port, peer_port) = (free_port(), free_port());
        let child = Etcd::launch(&dir, client_port, peer_port);
        let etcd = Etcd { child, dir, client_port, peer_port };
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

    /// Starts (again) the etcd of this data directory and ports.
    pub fn restart(&mut self) {
        self.child = Etcd::launch(&self.dir, self.client_port, self.peer_port);
        self.wait_until_it_answers();
    }

    fn launch(dir: &tempfile::TempDir, client_port: u16, peer_port: u16) -> Child {
        let (client, peer) = (format!("http://127.0.0.1:{client_port}"), format!("http://127.0.0.1:{peer_port}"));
        Command::new("etcd")
            .args(["--name", "proclease-test", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("proclease-test={peer}"), "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts")
    }

    fn wait_until_it_answers(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while EtcdStore::connect(&self.url("ready")).is_err() {
            assert!(Instant::now() < deadline, "etcd did not answer on port {} within 20 s", self.client_port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcd://127.0.0.1:<port>/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://127.0.0.1:{}/{prefix}", self.client_port)
    }

    /// A store on `prefix`.
    pub fn store(&self, prefix: &str) -> EtcdStore {
        EtcdStore::connect(&self.url(prefix)).expect("connects")
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

    /// Sends `signal` (`-STOP`, `-CONT`, …) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").args([signal, &self.child.id().to_string()]).status().expect("kill runs");
        assert!(status.success(), "kill {signal}");
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
    _dir: tempfile::TempDir,
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
        let dir = tempfile::tempdir().expect("data dir");
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> = ports.iter().enumerate().map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}")).collect();
        let initial = initial.join(",");
        let members = ports
            .iter()
            .enumerate()
            .map(|(i, (client, peer))| {
                let (client, peer) = (format!("http://127.0.0.1:{client}"), format!("http://127.0.0.1:{peer}"));
                let child = Command::new("etcd")
                    .args(["--name", &format!("m{i}"), "--data-dir"])
                    .arg(dir.path().join(format!("m{i}")))
                    .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
                    .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
                    .args(["--initial-cluster", &initial, "--initial-cluster-state", "new", "--initial-cluster-token", "proclease-test"])
                    .args(["--log-level", "error"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("etcd starts");
                Some(child)
            })
            .collect();
        let cluster = EtcdCluster { members, _dir: dir, client_ports: ports.iter().map(|(client, _)| *client).collect() };
        let deadline = Instant::now() + Duration::from_secs(30);
        for port in &cluster.client_ports {
            while EtcdStore::connect(&format!("etcd://127.0.0.1:{port}/ready")).is_err() {
                assert!(Instant::now() < deadline, "the etcd cluster did not elect a leader within 30 s");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Some(cluster)
    }

    /// `etcd://127.0.0.1:<port>,…/<prefix>` over every member.
    pub fn url(&self, prefix: &str) -> String {
        let endpoints: Vec<String> = self.client_ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
        format!("etcd://{}/{prefix}", endpoints.join(","))
    }

    /// Kills member `index` (SIGKILL) and reaps it.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}
