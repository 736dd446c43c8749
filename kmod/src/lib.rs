//! nv_peer_mem: the PeerDirect peer memory client that lets MLNX_OFED's IB
//! core register NVIDIA GPU memory (GPUDirect RDMA).
//!
//! This crate holds the module's logic, written against the [`Platform`]
//! trait so that the same code runs in the kernel (through `kernel.rs`, which
//! talks to the thin C glue in `glue/`) and in host tests (against test
//! doubles in `tests/`). It is `#![no_std]`: in the kernel it is compiled by
//! `kmod/Kbuild` with rustc directly, against a `core` built from the
//! toolchain's library sources, with no cargo and no registry.
#![cfg_attr(not(test), no_std)]

pub mod client;
pub mod context;
pub mod errno;
pub mod params;
pub mod peer_stats;
pub mod platform;
pub mod range;
pub mod registry;

#[cfg(nvpm_kernel)]
mod kernel;

pub use client::{Acquired, Driver};
pub use platform::{ClientKind, FreeCallback, Level, Platform, RegistrationStyle};
