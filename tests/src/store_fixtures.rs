//! Record contents the state-store tests write, shaped so that a torn or partial write is
//! always detectable.

/// The record of race round `round`, written by `writer`.
pub fn round_record(round: u64, writer: &str) -> String {
    format!("{{\"round\":{round},\"writer\":\"{writer}\"}}\n")
}

/// The round of a [`round_record`], or `None` if the text is not a complete one.
pub fn round_of(text: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    text.ends_with('\n').then_some(())?;
    value["round"].as_u64()
}

/// Padding that makes churn records span several pages, so a torn write would show.
const PAD: usize = 12_000;

/// A churn record for slot `k`, version `n`: ~12 KB with a self-check.
pub fn churn_record(k: u64, n: u64) -> String {
    let pad: String = std::iter::repeat_n(char::from(b'a' + (n % 26) as u8), PAD).collect();
    format!("{{\"k\":{k},\"n\":{n},\"pad\":\"{pad}\"}}\n")
}

/// Whether `text` is a complete churn record for slot `k`.
pub fn is_complete_churn_record(text: &str, k: u64) -> bool {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else { return false };
    let (Some(n), Some(pad)) = (value["n"].as_u64(), value["pad"].as_str()) else { return false };
    value["k"].as_u64() == Some(k) && text == churn_record(k, n) && pad.len() == PAD
}

/// The compare-and-swap contract every state store keeps (§3.3), checked through the
/// component's store trait on `record` (absent at the start, absent again at the end): create
/// never overwrites; replace and remove act only on the bytes whose sha256 is given, and on an
/// absent record do nothing.
pub fn assert_compare_and_swap_contract(s: &mut dyn proclease::core::effects::Store, record: &str) {
    use proclease::core::digest::sha256_hex;
    let read = |s: &mut dyn proclease::core::effects::Store| s.read_if_present(record, 1024).expect("read");
    assert_eq!(read(s), None);
    assert!(s.create_if_absent(record, "one\n").expect("create"));
    assert!(!s.create_if_absent(record, "two\n").expect("create again"), "create never overwrites");
    assert_eq!(read(s).as_deref(), Some("one\n"));

    let wrong = sha256_hex(b"something else");
    assert!(!s.replace_if_unchanged(record, &wrong, "two\n").expect("replace"));
    assert_eq!(read(s).as_deref(), Some("one\n"));
    assert!(s.replace_if_unchanged(record, &sha256_hex(b"one\n"), "two\n").expect("replace"));
    assert_eq!(read(s).as_deref(), Some("two\n"));

    assert!(!s.remove_if_unchanged(record, &sha256_hex(b"one\n")).expect("remove stale"));
    assert_eq!(read(s).as_deref(), Some("two\n"));
    assert!(s.remove_if_unchanged(record, &sha256_hex(b"two\n")).expect("remove"));
    assert_eq!(read(s), None);
    assert!(!s.remove_if_unchanged(record, &sha256_hex(b"two\n")).expect("remove absent"));
    assert!(!s.replace_if_unchanged(record, &sha256_hex(b"two\n"), "x\n").expect("replace absent"));
    assert_eq!(read(s), None, "a replace of an absent record creates nothing");
}
