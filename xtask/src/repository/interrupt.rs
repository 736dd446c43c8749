//! A build-repo stopped by a signal (SIGTERM from a job scheduler or
//! systemd, SIGINT from Ctrl-C, SIGHUP from a closed terminal) leaves
//! nothing behind (issue 58): the staged copy is a whole signed repository
//! beside the served one, and a gpg or apt-ftparchive still running would
//! go on writing into it. The served repository is untouched either way
//! (stage.rs: it changes only by the final exchange).
//!
//! The signals are blocked in every thread and taken by one watcher thread
//! with sigwait(3), so the cleanup runs as ordinary code, not in a signal
//! handler: it stops build-repo's own children (their parent process id is
//! ours, read from /proc), then removes the staged copy and exits with
//! 128 + the signal's number, as a shell reports a process killed by it.
//! The lock goes with the process (flock). Children start with an empty
//! signal mask (std::process resets it), so they stay killable.

use std::path::PathBuf;
use std::sync::Mutex;

/// The staged copy to remove if a signal comes (stage.rs sets and clears it).
static STAGED: Mutex<Option<PathBuf>> = Mutex::new(None);

const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Starts the watcher; call before any other thread is started, so every
/// thread inherits the blocked set.
pub fn watch() -> std::io::Result<()> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises before
    // any other use; the pointers passed are to this local set and live for
    // each call; pthread_sigmask changes only this thread's mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        set
    };
    std::thread::Builder::new()
        .name("build-repo-signals".to_owned())
        .spawn(move || {
            let mut signal: libc::c_int = 0;
            // SAFETY: @set is the initialised set above (moved here); sigwait
            // writes the signal's number into @signal, a local.
            while unsafe { libc::sigwait(&set, &mut signal) } != 0 {}
            stop(signal);
        })?;
    Ok(())
}

/// Records @dir as the staged copy (None: nothing to remove any more).
pub fn staged(dir: Option<PathBuf>) {
    *STAGED.lock().unwrap_or_else(|e| e.into_inner()) = dir;
}

fn stop(signal: libc::c_int) -> ! {
    let children = children();
    for &pid in &children {
        // SAFETY: kill takes no pointer; @pid is a process whose parent is
        // this one, so it is not reaped (and its id not reused) before we
        // exit.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    // A child that ignores SIGTERM must not outlive the staged copy.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline && children.iter().any(|&p| alive(p)) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for &pid in children.iter().filter(|&&p| alive(p)) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let staged = STAGED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(dir) = staged {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!(
            "build-repo: stopped by signal {signal}; removed {}, the repository is as it was",
            dir.display()
        );
    } else {
        eprintln!("build-repo: stopped by signal {signal}; the repository is as it was");
    }
    std::process::exit(128 + signal);
}

/// This process's children, from /proc/<pid>/stat's ppid field.
fn children() -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| parent_of(pid) == Some(me))
        .collect()
}

/// The parent of @pid: /proc/<pid>/stat is `pid (comm) state ppid ...`,
/// comm in parentheses and possibly holding spaces or parentheses itself.
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether @pid is still running (a zombie counts as gone: it writes nothing).
fn alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s[s.rfind(')')? + 1..]
                .split_whitespace()
                .next()
                .map(|st| st != "Z")
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_is_read_past_a_command_name_with_parentheses() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        assert_eq!(parent_of(pid), Some(std::process::id() as libc::pid_t));
        assert!(children().contains(&pid));
        assert!(alive(pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive(pid));
    }
}
