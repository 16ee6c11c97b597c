//! sha256 (spec §1.2) and the process-identity digests (§2.1–2.3).
//!
//! Every digest is 64 lowercase hex characters.

use alloc::string::String;
use core::fmt::Write as _;
use sha2::{Digest, Sha256};

use crate::js;

/// The error for a boot id that does not have the expected shape (§2.2).
pub const BOOT_ID_MALFORMED: &str = "system boot identity is malformed";

/// Lowercase hex sha256 of `bytes` (§1.2). A record's `contentSha256` is this over its file text.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `identityDigest(kind, value)` = hex sha256(UTF8(kind) ‖ 0x00 ‖ UTF8(value)) (§2.1).
pub fn identity_digest(kind: &str, value: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    hasher.update([0u8]);
    hasher.update(value.as_bytes());
    hex(&hasher.finalize())
}

/// The boot id of a Linux system from the raw content of `/proc/sys/kernel/random/boot_id`
/// (§2.2): trimmed, it must match `^[a-f0-9-]{36}$` case-insensitively (not lowercased), and
/// the result is `identityDigest("io-boot", trimmed)`.
///
/// Errors: [`BOOT_ID_MALFORMED`].
pub fn linux_boot_id(raw: &str) -> Result<String, &'static str> {
    let trimmed = js::trim(raw);
    let ok = trimmed.len() == 36 && trimmed.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-');
    if ok { Ok(identity_digest("io-boot", trimmed)) } else { Err(BOOT_ID_MALFORMED) }
}

/// The boot id of a Darwin system from `sysctl -n kern.bootsessionuuid` (§2.2): trimmed, an
/// 8-4-4-4-12 hex UUID in any case, lowercased, then `identityDigest("io-boot", uuid)`.
///
/// Errors: [`BOOT_ID_MALFORMED`].
pub fn darwin_boot_id(raw: &str) -> Result<String, &'static str> {
    let trimmed = js::trim(raw);
    let b = trimmed.as_bytes();
    let ok = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        });
    if ok { Ok(identity_digest("io-boot", &trimmed.to_ascii_lowercase())) } else { Err(BOOT_ID_MALFORMED) }
}

/// `processStartId = identityDigest("io-process-start", bootId ‖ 0x00 ‖ rawStart)` (§2.3).
pub fn process_start_id(boot_id: &str, raw_start: &str) -> String {
    let mut value = String::with_capacity(boot_id.len() + 1 + raw_start.len());
    value.push_str(boot_id);
    value.push('\0');
    value.push_str(raw_start);
    identity_digest("io-process-start", &value)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_examples() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let boot = linux_boot_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n").unwrap();
        assert_eq!(boot, "2e428f285ab5c7529544f882ab5704fda290111df77d659381ffdf07d68f8572");
        assert_eq!(process_start_id(&boot, "424242"), "1ff6d3c4b880467f02b3aa0cb9c4445150c501b47f5619cf383edc23f4af801f");
        assert_eq!(darwin_boot_id("00112233-4455-6677-8899-AABBCCDDEEFF").unwrap(), "fbb2c057897c5410fc49f4ecfba01406b116efa6a51254f43852ea89733a030a");
    }
}
