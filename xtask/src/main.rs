//! `cargo xtask`: the project's one orchestrator binary (rust-analyzer/bootc
//! style). Each subcommand lives in its own module; this file only parses the
//! command line and maps errors to exit statuses.

mod bench_kmod;
mod bench_kmod_report;
mod bench_writer;
#[cfg(test)]
mod contract;
mod deb;
mod distro;
mod dkms_package;
mod dpkg_version;
mod error;
mod files_below;
mod fixtures;
mod nccl_harness;
mod pipeline;
mod prebuilt;
mod release;
mod render;
mod repository;
mod srpm;
#[cfg(test)]
mod tar_gz_entries;
mod tarball;
#[cfg(test)]
mod tidy;
mod tool;
mod vm;
mod workspace;

use clap::{Parser, Subcommand};
use error::exit_status;
use std::process::ExitCode;

/// Builds, packages and tests nv_peer_mem, the GPUDirect RDMA peer memory
/// client kernel module.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", version = env!("CARGO_PKG_VERSION"), about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build nvidia_peer_memory-<version>-<release>.src.rpm, for
    /// `rpmbuild --rebuild` (see `build-srpm --help`).
    #[command(long_about = srpm::BUILD_LONG_ABOUT, mut_arg("distro", |a| a.help(srpm::DISTRO_HELP)))]
    BuildSrpm(pipeline::Request),
    /// Print build-srpm's wall time with this prebuilt binary.
    #[command(long_about = srpm::BENCH_LONG_ABOUT)]
    BenchSrpm(bench_writer::BenchArgs),
    /// Build nvidia-peer-memory_<version>.orig.tar.gz with a rendered debian/
    /// inside, for `dpkg-buildpackage -us -uc` (see `build-deb --help`).
    #[command(mut_arg("distro", |a| a.help(deb::DISTRO_HELP)))]
    BuildDeb(pipeline::Request),
    /// Print build-deb's wall time with this prebuilt binary.
    BenchDeb(bench_writer::BenchArgs),
    /// Build the DKMS binary packages (.deb and/or noarch .rpm) directly,
    /// without dpkg-buildpackage or rpmbuild (see `build-dkms --help`).
    #[command(long_about = dkms_package::BUILD_LONG_ABOUT, mut_arg("distro", |a| a.help(dkms_package::DISTRO_HELP)))]
    BuildDkms(dkms_package::BuildDkmsArgs),
    /// Build nv_peer_mem.ko for each --kernel on this build host and write
    /// prebuilt module packages, one per kernel, plus a metapackage per
    /// kernel flavour (see `build-modules --help`).
    #[command(long_about = prebuilt::BUILD_LONG_ABOUT, mut_arg("distro", |a| a.help(prebuilt::DISTRO_HELP)))]
    BuildModules(prebuilt::BuildModulesArgs),
    /// Put .deb or .rpm packages into a signed apt or dnf/zypper
    /// repository, keeping what it already has (see `build-repo --help`).
    #[command(long_about = repository::BUILD_LONG_ABOUT)]
    BuildRepo(repository::BuildRepoArgs),
    /// Boot Debian's kernels in QEMU and prove nv_peer_mem.ko there against
    /// PeerDirect and NVIDIA P2P test doubles (kmod/tests/vm).
    TestVm(vm::TestVmArgs),
    /// Build the VM harness's doubles for one kernel as the modules they
    /// stand in for (ib_core, nvidia), for ci/test-image.sh to package.
    VmStandins(vm::VmStandinsArgs),
    /// Boot a Debian disk image in QEMU and check what its test unit
    /// reports on the console (ci/test-image.sh).
    BootImage(vm::BootImageArgs),
    /// Build both source packages, the .src.rpm (build-srpm) and the Debian
    /// .orig.tar.gz (build-deb), and both DKMS binary packages (build-dkms),
    /// for this host's distribution or the defaults those commands pick.
    Dist(DistArgs),
    /// Print the module's cold build time, no-op rebuild time and stripped
    /// size (text/data/total).
    BenchKmod(bench_kmod::BenchKmodArgs),
    /// Build NCCL's own topology and GPUDirect RDMA code from the fixtures
    /// (nccl-harness/) and print its decisions for NCCL topology XML files.
    NcclHarness(nccl_harness::NcclHarnessArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = workspace::locate() {
        return exit_status(Err(error));
    }
    match cli.command {
        Command::BuildSrpm(args) => exit_status(srpm::build_srpm_command(&args)),
        Command::BenchSrpm(args) => exit_status(srpm::bench_srpm_command(&args)),
        Command::BuildDeb(args) => exit_status(deb::build_deb_command(&args)),
        Command::BenchDeb(args) => exit_status(deb::bench_deb_command(&args)),
        Command::BuildDkms(args) => exit_status(dkms_package::build_dkms_command(&args)),
        Command::BuildModules(args) => exit_status(prebuilt::build_modules_command(&args)),
        Command::BuildRepo(args) => exit_status(repository::build_repo_command(&args)),
        Command::TestVm(args) => exit_status(vm::test_vm_command(&args)),
        Command::VmStandins(args) => exit_status(vm::vm_standins_command(&args)),
        Command::BootImage(args) => exit_status(vm::boot_image_command(&args)),
        Command::Dist(args) => exit_status(dist(&args)),
        Command::BenchKmod(args) => exit_status(bench_kmod::bench_kmod_command(&args)),
        Command::NcclHarness(args) => exit_status(nccl_harness::nccl_harness_command(&args)),
    }
}

#[derive(clap::Args)]
struct DistArgs {
    /// Directory the files are written to (must exist and be writable).
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    out: std::path::PathBuf,
}

/// `dist`: the two documented routes' source packages and the DKMS
/// packages in one go.
fn dist(args: &DistArgs) -> anyhow::Result<()> {
    let request = pipeline::Request {
        out: args.out.clone(),
        distro: None,
        release: None,
    };
    srpm::build_srpm_command(&request)?;
    deb::build_deb_command(&request)?;
    dkms_package::build_dkms_command(&dkms_package::BuildDkmsArgs {
        request,
        format: Some(dkms_package::Format::Both),
    })
}
