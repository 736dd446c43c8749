//! Module signing for Secure Boot (build-modules --modsign-key/--modsign-cert):
//! the key is a file or a PKCS#11 URI (RFC 7512) naming a key in a token or
//! HSM, which the kernel's own `scripts/sign-file` opens through OpenSSL's
//! pkcs11 provider (docs/fleet.md, "Module signing").

use anyhow::{Context, Result, ensure};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long sign-file may take for one module: it takes well under a
/// second with a file or a local token.
const SIGN_BOUND: Duration = Duration::from_secs(120);

/// Where the signing key lives.
#[derive(Debug, PartialEq, Eq)]
pub enum SigningKey {
    /// a private key file (PEM), canonical so rpmbuild's chdir keeps it
    File(PathBuf),
    /// `pkcs11:...`, passed to sign-file as given. Its PIN is in the URI
    /// (`?pin-source=file:...` or `?pin-value=`): sign-file's provider
    /// path passes the store no passphrase, so KBUILD_SIGN_PIN, which its
    /// PEM and engine paths use, does not reach the token
    /// (docs/fleet.md, "A key in a token or HSM")
    Pkcs11(String),
}

/// The admin's signing key and its X.509 certificate (DER or PEM).
#[derive(Debug, PartialEq, Eq)]
pub struct ModSign {
    pub key: SigningKey,
    pub cert: PathBuf,
    /// The certificate in DER, read once: what the nodes enroll
    /// (NODE_CERTIFICATE).
    pub der: Vec<u8>,
}

/// The `--modsign-key`/`--modsign-cert` pair, checked: a file that exists,
/// or a PKCS#11 URI that sign-file can take as one argument and rpmbuild as
/// one macro value. None when neither is given (clap requires both or none).
pub fn from_args(key: Option<&str>, cert: Option<&Path>) -> Result<Option<ModSign>> {
    let (Some(key), Some(cert)) = (key, cert) else {
        return Ok(None);
    };
    let key = if key.starts_with("pkcs11:") {
        check_uri(key)?;
        SigningKey::Pkcs11(key.to_owned())
    } else {
        SigningKey::File(existing("--modsign-key", Path::new(key))?)
    };
    let cert = existing("--modsign-cert", cert)?;
    // Checked before anything is built: the nodes get it (NODE_CERTIFICATE).
    let der = der_certificate(&cert)?;
    Ok(Some(ModSign { key, cert, der }))
}

fn existing(option: &str, file: &Path) -> Result<PathBuf> {
    ensure!(
        file.is_file(),
        "{option} {}: no such file; pass the module signing key (a file, or a pkcs11: URI) and its certificate (see docs/fleet.md, \"Module signing\")",
        file.display()
    );
    std::fs::canonicalize(file).with_context(|| format!("{option} {}", file.display()))
}

/// RFC 7512's URI is ASCII with its reserved characters percent-encoded; a
/// space, a quote, a backslash or a control character would be split or
/// interpreted by the shell in rpmbuild's %install, so none is accepted.
fn check_uri(uri: &str) -> Result<()> {
    let bad = uri
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\'' | '\\' | '`' | '$'));
    ensure!(
        bad.is_none(),
        "--modsign-key {uri:?}: a pkcs11: URI may not contain {:?}; percent-encode it (RFC 7512), e.g. %20 for a space",
        bad.unwrap_or(' ')
    );
    let bytes = uri.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%' {
            let hex = bytes.get(i + 1..i + 3);
            ensure!(
                hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)),
                "--modsign-key {uri:?}: '%' at byte {i} is not followed by two hex digits (RFC 7512 percent-encoding)"
            );
        }
    }
    ensure!(
        uri.len() > "pkcs11:".len(),
        "--modsign-key pkcs11: names no key; give at least its token and object, e.g. pkcs11:token=modsign;object=nv_peer_mem"
    );
    Ok(())
}

/// The file build-modules writes beside the packages when it signs: the
/// certificate in DER, the form `mokutil --import` takes (mokutil(1)).
pub const NODE_CERTIFICATE: &str = "nv_peer_mem-modsign.der";

/// The certificate in DER for the nodes to enroll: a DER file as it is, a
/// PEM one converted (openssl x509 -outform DER), either checked to be one
/// X.509 certificate.
fn der_certificate(cert: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(cert)
        .with_context(|| format!("reading --modsign-cert {}", cert.display()))?;
    let inform = if bytes.starts_with(b"-----BEGIN") {
        "PEM"
    } else {
        "DER"
    };
    let out = Command::new("openssl")
        .args(["x509", "-inform", inform, "-outform", "DER", "-in"])
        .arg(cert)
        .output()
        .context("running openssl x509 (install openssl)")?;
    ensure!(
        out.status.success() && !out.stdout.is_empty(),
        "--modsign-cert {} is not an X.509 certificate (openssl x509 -inform {inform}: {})",
        cert.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out.stdout)
}

impl ModSign {
    /// What the build report says about @path, the written certificate.
    pub fn enrolment_note(path: &Path) -> String {
        format!(
            "\nNodes load these modules under Secure Boot once this certificate is enrolled as a MOK (docs/fleet.md, \"A Secure Boot node\"):\n    mokutil --import {0}    # then confirm in MokManager at the next boot\n    mokutil --test-key {0}  # says whether it is enrolled\n",
            path.display()
        )
    }

    /// The key as sign-file and the spec's `modsign_key` macro take it.
    pub fn key_arg(&self) -> &std::ffi::OsStr {
        match &self.key {
            SigningKey::File(path) => path.as_os_str(),
            SigningKey::Pkcs11(uri) => uri.as_ref(),
        }
    }

    /// Signs @ko in place with @sign_file (the kernel's scripts/sign-file)
    /// and @hash (its CONFIG_MODULE_SIG_HASH), then checks that modinfo
    /// finds a signer in it.
    pub fn sign(&self, sign_file: &Path, hash: &str, ko: &Path, release: &str) -> Result<()> {
        self.sign_within(sign_file, hash, ko, release, SIGN_BOUND)
    }

    fn sign_within(
        &self,
        sign_file: &Path,
        hash: &str,
        ko: &Path,
        release: &str,
        bound: Duration,
    ) -> Result<()> {
        let mut child = Command::new(sign_file)
            .arg(hash)
            .arg(self.key_arg())
            .arg(&self.cert)
            .arg(ko)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", sign_file.display()))?;
        // A token can hang sign-file rather than fail it (SoftHSM under
        // OpenSSL's pkcs11 provider deadlocks at login unless the default
        // provider is activated first: docs/fleet.md, "A key in a token
        // or HSM"); a build must end with the reason instead.
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > bound {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!(
                    "{} did not finish signing the module for {release} within {} s and was stopped. With SoftHSM behind OpenSSL's pkcs11 provider, activate OpenSSL's default provider before the pkcs11 one (an OPENSSL_CONF whose [provider_sect] lists default first; docs/fleet.md, \"A key in a token or HSM\")",
                    sign_file.display(),
                    bound.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.success() {
            let mut said = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut said);
            }
            let hint = match &self.key {
                SigningKey::Pkcs11(_) => {
                    "; sign-file opens pkcs11: keys through OpenSSL's pkcs11 provider: install it (Debian: pkcs11-provider), point PKCS11_PROVIDER_MODULE at the token's PKCS#11 module, and give the token's PIN in the URI (?pin-source=file:<file with the PIN>); \"key values mismatch\" means no PIN reached the token"
                }
                SigningKey::File(_) => "",
            };
            anyhow::bail!(
                "{} could not sign the module for {release} with {}{hint}:\n{}",
                sign_file.display(),
                self.key_arg().to_string_lossy(),
                said.trim()
            );
        }
        let signer = crate::tool::stdout(Command::new("modinfo").args(["-F", "signer"]).arg(ko))
            .context(crate::tool::KMOD)?;
        ensure!(
            !signer.trim().is_empty(),
            "sign-file ran but modinfo finds no signer in the module for {release}"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway self-signed certificate in PEM and DER under @dir.
    fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
        std::fs::create_dir_all(dir).unwrap();
        let (pem, der) = (dir.join("cert.pem"), dir.join("cert.der"));
        let made = Command::new("openssl")
            .args([
                "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=nv_peer_mem modsign.rs test/", "-keyout"])
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(&pem)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        let converted = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&pem)
            .arg("-out")
            .arg(&der)
            .status()
            .unwrap();
        assert!(converted.success());
        (pem, der)
    }

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nvpm-modsign-{name}-{}", std::process::id()))
    }

    #[test]
    fn the_nodes_get_the_certificate_in_der_whether_given_in_pem_or_der() {
        let dir = scratch("cert");
        let (pem, der) = certificate(&dir);
        let want = std::fs::read(&der).unwrap();
        for cert in [&pem, &der] {
            let sign = from_args(Some("pkcs11:token=t;object=o"), Some(cert))
                .unwrap()
                .unwrap();
            assert_eq!(sign.der, want, "{}", cert.display());
        }
        let not_a_cert = dir.join("key.pem");
        let err = from_args(Some("pkcs11:token=t;object=o"), Some(&not_a_cert)).unwrap_err();
        assert!(
            format!("{err:#}").contains("is not an X.509 certificate"),
            "{err:#}"
        );
        let note = ModSign::enrolment_note(Path::new("/out/nv_peer_mem-modsign.der"));
        assert!(note.contains("mokutil --import /out/nv_peer_mem-modsign.der"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pkcs11_uri_is_taken_as_given_and_a_file_must_exist() {
        let dir = scratch("uri");
        let (cert, _) = certificate(&dir);
        let uri = "pkcs11:token=site%20keys;object=nv_peer_mem;type=private";
        let sign = from_args(Some(uri), Some(&cert)).unwrap().unwrap();
        assert_eq!(sign.key, SigningKey::Pkcs11(uri.to_owned()));
        assert_eq!(sign.key_arg(), uri);
        let missing = from_args(Some("/nowhere/key.pem"), Some(&cert)).unwrap_err();
        assert!(format!("{missing:#}").contains("--modsign-key /nowhere/key.pem: no such file"));
        assert_eq!(from_args(None, None).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A sign-file that hangs (as sign-file does on SoftHSM's deadlock) is
    /// stopped and named; one that fails passes on what it said.
    #[test]
    fn a_hanging_or_failing_sign_file_ends_with_the_reason() {
        let dir = scratch("hang");
        let (cert, _) = certificate(&dir);
        let sign = from_args(Some("pkcs11:token=t;object=o"), Some(&cert))
            .unwrap()
            .unwrap();
        let script = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap();
            path
        };
        let ko = dir.join("m.ko");
        let hang = script("hang", "exec sleep 30");
        let started = Instant::now();
        let err = sign
            .sign_within(
                &hang,
                "sha256",
                &ko,
                "6.1.0-56-amd64",
                Duration::from_secs(1),
            )
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(20), "not stopped");
        assert!(
            format!("{err:#}")
                .contains("did not finish signing the module for 6.1.0-56-amd64 within 1 s"),
            "{err:#}"
        );
        let fails = script("fails", "echo 'key values mismatch' >&2; exit 1");
        let err = sign
            .sign_within(
                &fails,
                "sha256",
                &ko,
                "6.1.0-56-amd64",
                Duration::from_secs(10),
            )
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains(
                "could not sign the module for 6.1.0-56-amd64 with pkcs11:token=t;object=o"
            ),
            "{text}"
        );
        assert!(
            text.contains("pin-source=file:") && text.ends_with("key values mismatch"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_uri_the_shell_would_split_or_expand_is_refused() {
        let dir = scratch("shell");
        let (cert, _) = certificate(&dir);
        for (uri, says) in [
            ("pkcs11:token=site keys", "may not contain ' '"),
            ("pkcs11:token=$(reboot)", "may not contain '$'"),
            ("pkcs11:object=a'b", "may not contain '\\''"),
            ("pkcs11:token=a%2", "is not followed by two hex digits"),
            ("pkcs11:", "names no key"),
        ] {
            let err = from_args(Some(uri), Some(&cert)).unwrap_err();
            assert!(format!("{err:#}").contains(says), "{uri}: {err:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
