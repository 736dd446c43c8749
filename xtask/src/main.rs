//! `cargo xtask`: the project's one orchestrator binary (rust-analyzer/bootc
//! style). Each subcommand lives in its own module; this file only parses the
//! command line and maps errors to exit statuses.

mod workspace;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Builds, packages and tests nv_peer_mem, the GPUDirect RDMA peer memory
/// client kernel module.
#[derive(Parser)]
#[command(name = "cargo xtask", version = workspace::VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {}
}
