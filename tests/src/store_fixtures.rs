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
