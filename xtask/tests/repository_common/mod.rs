//! What the repository tests share (repositories.rs for apt,
//! rpm_repositories.rs for dnf): a scratch directory, a throwaway gpg key,
//! a command that must succeed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-repos-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A throwaway signing key in @dir/gnupg, its public half in @dir/key.gpg
/// (binary, for apt) and @dir/key.asc (armored, for dnf); (GNUPGHOME,
/// fingerprint).
pub fn key(dir: &Path) -> (PathBuf, String) {
    let home = dir.join("gnupg");
    std::fs::create_dir_all(&home).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let gpg = |args: &[&str]| {
        let out = Command::new("gpg")
            .env("GNUPGHOME", &home)
            .args([
                "--batch",
                "--quiet",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    gpg(&[
        "--quick-gen-key",
        "build-repo test <test@invalid>",
        "ed25519",
        "sign",
        "never",
    ]);
    let listing = gpg(&["--with-colons", "--list-secret-keys"]);
    let fingerprint = listing
        .lines()
        .find_map(|l| l.strip_prefix("fpr:"))
        .and_then(|l| l.split(':').find(|f| !f.is_empty()))
        .unwrap()
        .to_owned();
    let exported = Command::new("gpg")
        .env("GNUPGHOME", &home)
        .args(["--batch", "--export", &fingerprint])
        .output()
        .unwrap()
        .stdout;
    std::fs::write(dir.join("key.gpg"), exported).unwrap();
    let armored = Command::new("gpg")
        .env("GNUPGHOME", &home)
        .args(["--batch", "--armor", "--export", &fingerprint])
        .output()
        .unwrap()
        .stdout;
    std::fs::write(dir.join("key.asc"), armored).unwrap();
    (home, fingerprint)
}

/// @out, after asserting the command succeeded (its output otherwise).
pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
