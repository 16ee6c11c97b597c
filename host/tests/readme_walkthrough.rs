//! The README's "After a crash" walkthrough, run as written: the shell block is read from
//! `README.md` and executed line by line in one `sh`, with `proclease` on the PATH and a fresh
//! home directory. The one placeholder, `<CHILD>`, is filled with the pid the README tells the
//! reader to take from doctor's CHILD column — read from that column of the printed table.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_proclease");

/// The first ```sh block after the heading `## After a crash`.
fn walkthrough() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("README.md");
    let section = readme.split("## After a crash").nth(1).expect("an `## After a crash` section");
    let block = section.split("```sh\n").nth(1).and_then(|b| b.split("\n```").next()).expect("a sh block");
    // Comment-only lines continue the previous line's comment.
    block.lines().filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()).map(String::from).collect()
}

/// Runs `script` in `sh -e` with the walkthrough's environment.
fn sh(home: &Path, bin_dir: &Path, script: &str) -> Output {
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    // Output goes to files, not pipes: the `sleep 600` the walkthrough leaves running inherits
    // them and would hold a pipe open until it ends.
    let out = home.with_file_name("walkthrough.out");
    let err = home.with_file_name("walkthrough.err");
    let status = Command::new("sh")
        .args(["-ec", script])
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .env("HOME", home)
        .env("PATH", path)
        .env_remove("PROCLEASE_STATE_HOME")
        .env_remove("GHOSTGET_STATE_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("RUST_LOG")
        .status()
        .expect("sh");
    Output { status, stdout: std::fs::read(&out).expect("stdout"), stderr: std::fs::read(&err).expect("stderr") }
}

#[test]
fn the_after_a_crash_walkthrough_works_as_written() {
    let lines = walkthrough();
    let at_kill = lines.iter().position(|l| l.contains("<CHILD>")).expect("a `kill <CHILD>` line");
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("home");
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir(&bin_dir).expect("bin");
    std::os::unix::fs::symlink(BIN, bin_dir.join("proclease")).expect("proclease on the PATH");

    // Up to the doctor that shows CHILD.
    let first = sh(&home, &bin_dir, &lines[..at_kill].join("\n"));
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(first.status.success(), "{text}{}", String::from_utf8_lossy(&first.stderr));
    let header = text.lines().find(|l| l.starts_with("KIND ")).unwrap_or_else(|| panic!("doctor's table: {text}"));
    let row = text.lines().find(|l| l.contains("proclease-demo/long")).unwrap_or_else(|| panic!("the lease's row: {text}"));
    let end = header.find("CHILD").expect("a CHILD column") + "CHILD".len();
    let child = row[..end].trim_end().rsplit(' ').next().expect("a pid").to_string();
    assert!(child.parse::<u32>().is_ok(), "CHILD holds a pid: {row}");
    assert!(row.contains(" active "), "the lease is active while its child runs: {row}");
    let job = home.join("proclease-demo/long");
    assert!(job.is_dir());

    // The rest, with the pid read from the table.
    let rest: Vec<String> = lines[at_kill..].iter().map(|l| l.replace("<CHILD>", &child)).collect();
    let second = sh(&home, &bin_dir, &rest.join("\n"));
    let text = String::from_utf8_lossy(&second.stdout).into_owned();
    let _ = Command::new("kill").arg("-9").arg(&child).status();
    assert!(second.status.success(), "{text}{}", String::from_utf8_lossy(&second.stderr));
    assert!(text.contains(" recoverable "), "after `kill <CHILD>` doctor shows it recoverable: {text}");
    assert!(text.contains(&format!("would remove {}", job.display())), "{text}");
    assert!(text.contains(&format!("removed {}", job.display())) && text.contains("recovered: 1\n"), "{text}");
    assert!(!job.exists(), "recover removed the directory");
}
