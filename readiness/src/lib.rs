//! gpudirect-rdma-check: can this node do GPUDirect RDMA, by which path,
//! and what stands in the way. It reads sysfs and procfs (and asks
//! nvidia-smi for memory sizes when it is installed), changes nothing, and
//! reports each fact with its fix (docs/readiness.md).

pub mod boot_loader;
pub mod c2c;
pub mod check;
pub mod config_space;
pub mod consumers;
pub mod cuda;
pub mod data_direct;
pub mod elf;
pub mod gdr_reads;
pub mod health;
pub mod host;
pub mod iommu;
pub mod kernel_modules;
pub mod memory;
pub mod nccl_bandwidth;
pub mod nccl_ib;
pub mod nccl_local_net;
pub mod nccl_topo_file;
pub mod nccl_version;
pub mod next_boot;
pub mod next_boot_dkms;
pub mod next_boot_render;
#[cfg(test)]
mod next_boot_tests;
pub mod nfd;
pub mod nvidia;
pub mod nvlink;
pub mod output_file;
pub mod pci;
pub mod peer_clients;
pub mod pxn;
pub mod rdma;
pub mod registration;
pub mod render;
pub mod report;
pub mod service;
pub mod signing_keys;
pub mod snapshot;
pub mod topology;
pub mod vm;
