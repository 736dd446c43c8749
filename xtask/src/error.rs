//! The ground floor every subcommand stands on: how a failure is classified
//! and which exit status it gets. Nothing here imports another xtask module.
//!
//! - exit 0: done;
//! - exit 2: bad input (unknown distro, malformed packaging data, a broken
//!   template, an unusable --out, not a checkout, ...): the user or the data
//!   must change, nothing was written. clap's usage errors (a bad
//!   `--release`, say) exit 2 as well;
//! - exit 1: anything else (a tool failed, a write failed, a test failed).
//!
//! A closed stdout (`cargo xtask build-deb | head -1`) is not a failure:
//! what was printed is the report, and the work is done. Routes print
//! through [`print_report`], which turns EPIPE into [`StdoutClosed`], and
//! `exit_status` ends such a run quietly with status 0.

use std::io::Write;
use std::process::ExitCode;

/// Bad input from the user or the packaging data, reported with exit
/// status 2, like clap's own usage errors.
#[derive(Debug)]
pub struct BadInput(anyhow::Error);

impl BadInput {
    /// A bad-input error with this message (which should name the fix).
    pub fn error(message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(BadInput(anyhow::anyhow!(message.into())))
    }

    /// Marks an error as bad input, keeping its message and causes.
    pub fn wrap(error: anyhow::Error) -> anyhow::Error {
        if is_bad_input(&error) {
            return error;
        }
        anyhow::Error::new(BadInput(error))
    }
}

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for BadInput {}

/// Whether any cause of @error is bad input.
pub fn is_bad_input(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<BadInput>())
}

/// Stdout was closed by its reader before the report was printed.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Prints @text to stdout; a reader that went away is [`StdoutClosed`], not
/// a panic (which is what `println!` does).
pub fn print_report(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(StdoutClosed))
        }
        Err(error) => Err(anyhow::Error::new(error).context("writing to stdout")),
    }
}

/// Prints the error (with its causes) and maps it to an exit status.
pub fn exit_status(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.chain().any(|cause| cause.is::<StdoutClosed>()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            if is_bad_input(&error) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_found_below_context_and_not_wrapped_twice() {
        let error = BadInput::error("unknown distro").context("while planning");
        assert!(is_bad_input(&error));
        let wrapped = BadInput::wrap(BadInput::error("x"));
        assert_eq!(wrapped.chain().filter(|c| c.is::<BadInput>()).count(), 1);
        assert!(!is_bad_input(&anyhow::anyhow!("a tool failed")));
    }
}
