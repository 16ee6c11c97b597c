//! What a supervisor's dead-man timer leaves behind (#45 case 9; `docs/cluster.md`,
//! "Self-fencing"). The timer kills a supervisor that cannot run — stopped, frozen, suspended
//! for 15/16 of its TTL — with SIGKILL, which leaves it no instant to say why. So the supervisor
//! says it beforehand: while its timer is armed it keeps a small record in the state home,
//! `.proclease/dead-man/<pid>-<process start id>.json`, and removes it when the timer is
//! disarmed. A record whose supervisor is gone means it died while armed: `doctor` says so
//! (the timer killed it if it was stopped past the TTL; otherwise something else did), and
//! `recover` forgets the record.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proclease_core::records::Owner;

/// The records' directory, under the state home.
pub const DIRECTORY: &str = ".proclease/dead-man";

/// One record: the supervisor, when its timer was armed, and the TTL it counts against.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Armed {
    /// The supervisor's boot id (§2.2).
    pub boot_id: String,
    /// Its pid.
    pub pid: u64,
    /// Its process start id (§2.2).
    pub process_start_id: String,
    /// When the timer was armed (ms since the Unix epoch).
    pub armed_at_ms: u64,
    /// The presence TTL (ms): the timer fires 15/16 of it after the last acknowledged renewal.
    pub ttl_ms: u64,
}

impl Armed {
    /// The supervisor as an owner, to judge whether it lives.
    pub fn owner(&self) -> Owner {
        Owner { pid: self.pid, boot_id: self.boot_id.clone(), process_start_id: self.process_start_id.clone() }
    }

    /// What `doctor` says of a record whose supervisor is gone.
    pub fn words(&self) -> String {
        format!(
            "supervisor pid {} died while its cluster dead-man timer was armed (TTL {}): if it was stopped, frozen or suspended for 15/16 \
             of the TTL without an acknowledged renewal, the timer killed it and its command (SIGKILL, exit 137), before etcd could let \
             another machine take over; `proclease recover` forgets this record",
            self.pid,
            humantime::format_duration(Duration::from_millis(self.ttl_ms))
        )
    }
}

/// The record of this armed timer; removed when dropped (the timer disarmed).
#[derive(Debug)]
pub struct Record {
    path: PathBuf,
}

impl Record {
    /// Writes the record of `supervisor`'s timer, armed for `ttl`, in the state home `home`.
    ///
    /// Errors: the record cannot be written (the caller goes on without it: the timer still
    /// kills, only without a record).
    pub fn write(home: &Path, supervisor: &Owner, ttl: Duration) -> std::io::Result<Record> {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        let dir = home.join(DIRECTORY);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let armed_at_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let armed = Armed {
            boot_id: supervisor.boot_id.clone(),
            pid: supervisor.pid,
            process_start_id: supervisor.process_start_id.clone(),
            armed_at_ms,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let text = serde_json::to_string(&armed).map_err(std::io::Error::other)?;
        let path = dir.join(format!("{}-{}.json", supervisor.pid, supervisor.process_start_id));
        let temporary = dir.join(format!(".{}-{}.tmp", supervisor.pid, supervisor.process_start_id));
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
        file.write_all(text.as_bytes())?;
        std::fs::rename(&temporary, &path)?;
        Ok(Record { path })
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The records in the state home `home` whose supervisor `alive` does not find alive, with
/// their paths; unreadable files are skipped (they are not proclease's).
pub fn leftovers(home: &Path, alive: impl Fn(&Owner) -> bool) -> Vec<(PathBuf, Armed)> {
    let Ok(entries) = std::fs::read_dir(home.join(DIRECTORY)) else { return Vec::new() };
    let mut found: Vec<(PathBuf, Armed)> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok().filter(|text| text.len() <= 4096)?;
            let armed: Armed = serde_json::from_str(&text).ok()?;
            (!alive(&armed.owner())).then_some((path, armed))
        })
        .collect();
    found.sort_by_key(|(_, armed)| armed.armed_at_ms);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_stays_only_while_the_timer_is_armed_and_names_a_gone_supervisor() {
        let home = tempfile::tempdir().expect("tempdir");
        let owner = Owner { pid: 4242, boot_id: "b".repeat(64), process_start_id: "c".repeat(64) };
        let record = Record::write(home.path(), &owner, Duration::from_secs(10)).expect("written");
        assert!(leftovers(home.path(), |_| true).is_empty(), "a live supervisor's record is no leftover");
        let gone = leftovers(home.path(), |_| false);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].1.owner(), owner);
        assert!(gone[0].1.words().starts_with("supervisor pid 4242 died while its cluster dead-man timer was armed (TTL 10s)"), "{}", gone[0].1.words());
        drop(record);
        assert!(leftovers(home.path(), |_| false).is_empty(), "disarmed: removed");
    }
}
