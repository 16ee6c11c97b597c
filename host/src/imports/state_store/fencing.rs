//! The file store's fencing tokens (issue #28; `docs/cluster.md`, "Fencing tokens"): a counter
//! kept beside the export admission, so that an exclusive run's command on one machine gets a
//! token that only grows, as in cluster mode (where the token is the etcd revision of the
//! admission's write).
//!
//! One file, `<state home>/.proclease/fence/export-admission.json` (mode 0600, in a 0700
//! directory), holding the canonical `{"claimId":ID,"schemaVersion":1,"token":N}` and a newline:
//! the last token handed out and the admission claim (its `id`, fresh per acquire, §6A.5 step c)
//! it was handed out for. Only the admission's holder advances it ([`FileFence::advance`]), right
//! after acquiring and before its command starts, so two writers never race: the admission
//! excludes them. A write goes to a temporary (`.tmp-<pid>-<uuid>`, fsynced), is renamed over the
//! file, and the directory fsynced, so a token handed out survives a power loss and a crash
//! leaves the old counter or the new one. The reference's records are unchanged: the counter
//! lives under `.proclease/`, which no store path names and ghostget never reads.
//!
//! A token is current ([`crate::api::fencing`]) while it is the counter's last token and the
//! admission's claim still has the counter's claim id: a release, a takeover, or a holder that
//! does not advance the counter (ghostget) makes it stale.

use std::os::fd::{AsFd as _, OwnedFd};

use serde_json::{Value, json};

use super::home::StateHome;
use crate::fsops;
use crate::seam::files::{self, StableRead};
use crate::seam::{Fs as _, NativeFs};

/// The counter's directory in the state home (for messages).
pub const ROOT: &str = ".proclease/fence";
/// The counter file's name, in [`ROOT`].
pub const COUNTER: &str = "export-admission.json";
/// The largest counter file read: 4 KiB (it is under 100 bytes).
const MAX_BYTES: u64 = 4096;

/// The last fencing token handed out on a state home, and the admission claim it went to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The token: 1 for the first exclusive run of a state home, one more for each later one.
    pub token: i64,
    /// The `id` of the export admission claim its holder held.
    pub claim_id: String,
}

/// The fencing counter of one state home.
#[derive(Debug)]
pub struct FileFence {
    root: OwnedFd,
}

fn context(what: String) -> impl FnOnce(std::io::Error) -> std::io::Error {
    move |e| std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl FileFence {
    /// Opens (creating 0700 if absent) `.proclease/fence` in `home`: for the admission's holder.
    ///
    /// Errors: the directory cannot be created, or is not this user's with mode 0700.
    pub fn open(home: &StateHome) -> std::io::Result<FileFence> {
        let internal = fsops::private_dir(home.dir(), ".proclease").map_err(|(op, e)| context(format!(".proclease: {op}"))(e))?;
        let root = fsops::private_dir(&internal, "fence").map_err(|(op, e)| context(format!("{ROOT}: {op}"))(e))?;
        Ok(FileFence { root })
    }

    /// Opens `.proclease/fence` in `home` without creating anything: for a check, which writes
    /// nothing. `None` when no token was ever handed out there.
    ///
    /// Errors: the directory cannot be opened, or is not this user's with mode 0700.
    pub fn open_existing(home: &StateHome) -> std::io::Result<Option<FileFence>> {
        let open = |dir: &OwnedFd, name: &str, path: &str| -> std::io::Result<Option<OwnedFd>> {
            fsops::open_private_dir_if_present(dir, name).map_err(|(_, e)| context(path.to_owned())(e))
        };
        let home_dir = home.dir().as_fd().try_clone_to_owned()?;
        let Some(internal) = open(&home_dir, ".proclease", ".proclease")? else { return Ok(None) };
        Ok(open(&internal, "fence", ROOT)?.map(|root| FileFence { root }))
    }

    /// The last token handed out, `None` before the first.
    ///
    /// Errors: the file cannot be read, is not this user's private regular file, changed while
    /// it was read, or does not hold a counter (`InvalidData`, naming it: set it aside only when
    /// no exclusive run holds the admission, since tokens then start again from 1).
    pub fn current(&self) -> std::io::Result<Option<Issued>> {
        let path = format!("{ROOT}/{COUNTER}");
        let file = match NativeFs.open_file(&self.root, COUNTER) {
            Ok(file) => file,
            Err(crate::seam::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(context(path)(e.into())),
        };
        let stat = NativeFs.stat_file(&file).map_err(|e| context(path.clone())(e.into()))?;
        if let Some(reason) = files::unsafe_file_reason(&stat, NativeFs.euid()) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{path}: {reason}")));
        }
        let bytes = match files::read_stable(&NativeFs, &file, &stat, MAX_BYTES).map_err(|e| context(path.clone())(e.into()))? {
            StableRead::Bytes(bytes) => bytes,
            StableRead::TooLarge => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{path}: larger than {MAX_BYTES} bytes"))),
            StableRead::Changed | StableRead::StatusChanged(_) => return Err(std::io::Error::other(format!("{path}: changed while it was read; retry"))),
        };
        parse(&bytes).map(Some).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{path}: not a fencing counter")))
    }

    /// Hands out the next token to the holder of the export admission claim `claim_id`: the last
    /// one plus one (1 for the first), durable before it returns. Call it only while holding
    /// that claim.
    ///
    /// Errors: as [`FileFence::current`]; the temporary cannot be written, renamed or the
    /// directory fsynced (the counter is then the old one or the new one, never torn).
    pub fn advance(&self, claim_id: &str) -> std::io::Result<i64> {
        let next = match self.current()? {
            None => 1,
            Some(issued) => issued.token.checked_add(1).ok_or_else(|| std::io::Error::other(format!("{ROOT}/{COUNTER}: no token is left")))?,
        };
        let mut text = serde_json::to_string(&json!({"claimId": claim_id, "schemaVersion": 1, "token": next})).map_err(std::io::Error::other)?;
        text.push('\n');
        // The holder is the only writer: a temporary here is one a crashed or failed earlier
        // holder left, and goes (so they never pile up).
        if let Ok(names) = fsops::names_starting_with(&self.root, ".tmp-", 1_000) {
            for name in names {
                let _ = rustix::fs::unlinkat(&self.root, name.as_str(), rustix::fs::AtFlags::empty());
            }
        }
        let temporary = format!(".tmp-{}-{}", std::process::id(), uuid::Uuid::new_v4());
        let unlink = || {
            let _ = rustix::fs::unlinkat(&self.root, temporary.as_str(), rustix::fs::AtFlags::empty());
        };
        if let Err(e) = fsops::write_new_file(&self.root, &temporary, text.as_bytes()) {
            unlink();
            return Err(context(format!("{ROOT}/{temporary}"))(e));
        }
        if let Err(e) = rustix::fs::renameat(&self.root, temporary.as_str(), &self.root, COUNTER) {
            unlink();
            return Err(context(format!("{ROOT}/{COUNTER}: rename"))(e.into()));
        }
        fsops::fsync_dir(&self.root).map_err(context(format!("{ROOT}: fsync")))?;
        Ok(next)
    }
}

/// The counter in `bytes`: exactly the canonical object this module writes (serde_json's map
/// is sorted, so `to_string` is canonical here) and a newline.
fn parse(bytes: &[u8]) -> Option<Issued> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let value: Value = serde_json::from_str(text).ok()?;
    let object = value.as_object()?;
    if object.len() != 3 || object.get("schemaVersion")?.as_u64()? != 1 {
        return None;
    }
    let token = object.get("token")?.as_i64().filter(|t| *t >= 1)?;
    let claim_id = object.get("claimId")?.as_str()?.to_owned();
    (serde_json::to_string(&value).ok()? == text).then_some(Issued { token, claim_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_grow_from_one_and_name_their_claim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = StateHome::open(&dir.path().join("state")).expect("state home");
        let fence = FileFence::open(&home).expect("open");
        assert_eq!(fence.current().expect("read"), None);
        assert_eq!(fence.advance("a").expect("advance"), 1);
        assert_eq!(fence.advance("b").expect("advance"), 2);
        assert_eq!(fence.current().expect("read"), Some(Issued { token: 2, claim_id: "b".into() }));
        let text = std::fs::read_to_string(dir.path().join("state/.proclease/fence/export-admission.json")).expect("counter");
        assert_eq!(text, "{\"claimId\":\"b\",\"schemaVersion\":1,\"token\":2}\n");
        // A check opens it without creating anything; a state home without one has no token.
        assert!(FileFence::open_existing(&home).expect("open").is_some());
        let other = tempfile::tempdir().expect("tempdir");
        let bare = StateHome::open(&other.path().join("state")).expect("state home");
        assert!(FileFence::open_existing(&bare).expect("open").is_none());
        assert!(!other.path().join("state/.proclease/fence").exists(), "nothing was created");
        // No temporary is left behind, nor one a crashed holder left.
        std::fs::write(dir.path().join("state/.proclease/fence/.tmp-1-crashed"), "{").expect("a crashed holder's temporary");
        assert_eq!(fence.advance("b").expect("advance"), 3);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("state/.proclease/fence")).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("export-admission.json")]);
    }

    #[test]
    fn anything_but_a_counter_is_refused_by_name() {
        for bad in [
            "",
            "{}\n",
            "{\"claimId\":\"b\",\"schemaVersion\":1,\"token\":0}\n",
            "{\"token\":2,\"claimId\":\"b\",\"schemaVersion\":1}\n",
            "{\"claimId\":\"b\",\"schemaVersion\":1,\"token\":2}",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let home = StateHome::open(&dir.path().join("state")).expect("state home");
        let fence = FileFence::open(&home).expect("open");
        let counter = dir.path().join("state/.proclease/fence/export-admission.json");
        std::fs::write(&counter, "garbage\n").expect("write");
        std::fs::set_permissions(&counter, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        let error = fence.current().expect_err("refused");
        assert!(error.to_string().contains(".proclease/fence/export-admission.json: not a fencing counter"), "{error}");
        assert!(fence.advance("c").is_err(), "no token is handed out over an unreadable counter");
    }
}
