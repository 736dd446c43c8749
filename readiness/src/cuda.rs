//! What the CUDA driver says of each GPU's GPUDirect RDMA support:
//! `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`, the attribute NCCL asks
//! before anything else (NCCL 2.28.9 and 2.30.7 `src/plugin/net.cc`,
//! `ncclGpuGdrSupport`: `cudaDeviceGetAttribute(cudaDevAttrGPUDirectRDMASupported)`,
//! the GPU's `gdr` in its topology; `graph/paths.cc`, `ncclTopoCheckGdr`:
//! a GPU whose `gdr` is 0 gets no GPUDirect RDMA whatever its distance).
//! CUDA's header documents it as "Device supports GPUDirect RDMA APIs, like
//! nvidia_p2p_get_pages", so it stands for the peer clients too. No file
//! holds it: only libcuda answers (docs/diagnostics.md, "The GPU's own
//! GPUDirect RDMA support").
//!
//! The check asks in a child process, itself run with `--cuda-attributes`
//! (`NV_PEER_MEM_CUDA_QUERY` names another program, for tests), given up
//! after `memory::TIMEOUT` as nvidia-smi is: `cuInit` wakes GPUs without
//! persistence mode and can hang on a wedged one, and libcuda stays out of
//! the check's own process. Asked only in the forms people read, where
//! a GPU has a NIC to judge with.

use crate::host::Host;
use crate::memory::{TIMEOUT, run_bounded, sysfs_bus_id};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::process::Command;

/// The child's argument: print each GPU's attributes and exit.
pub const CHILD_ARG: &str = "--cuda-attributes";

/// cuda.h (CUDA 12.4, `CUdevice_attribute`).
const GPU_DIRECT_RDMA_SUPPORTED: c_int = 116;

/// Whether CUDA supports GPUDirect RDMA on each GPU, by PCI address
/// (`0000:00:06.0`); None where CUDA could not be asked (no libcuda, no
/// answer in time, a replay without the record).
pub fn gdr_supported(host: &Host) -> Option<BTreeMap<String, bool>> {
    let out = host.program("cuda-attributes", || {
        let program = match std::env::var_os("NV_PEER_MEM_CUDA_QUERY") {
            Some(p) => p.into(),
            None => std::env::current_exe().ok()?,
        };
        run_bounded(
            Command::new(program)
                .arg(CHILD_ARG)
                // Every GPU of the node, whatever the caller's job sees.
                .env_remove("CUDA_VISIBLE_DEVICES"),
            TIMEOUT,
        )
        .filter(|(code, _)| *code == Some(0))
        .map(|(_, out)| out)
    })?;
    parse(&out)
}

/// `0000:00:06.0 gpu_direct_rdma_supported=1` per GPU, as the child
/// prints; None for anything else (a partial answer judges nothing).
pub fn parse(text: &str) -> Option<BTreeMap<String, bool>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (bus, value) = line.trim().split_once(" gpu_direct_rdma_supported=")?;
            let supported = match value {
                "0" => false,
                "1" => true,
                _ => return None,
            };
            Some((sysfs_bus_id(bus)?, supported))
        })
        .collect()
}

/// The child: asks libcuda and prints one line per GPU; the exit status
/// says why not (1: no libcuda, 2: a call failed).
pub fn child() -> i32 {
    match query() {
        Ok(lines) => {
            print!("{lines}");
            0
        }
        Err((status, why)) => {
            eprintln!("gpudirect-rdma-check {CHILD_ARG}: {why}");
            status
        }
    }
}

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuDeviceGetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;

// SAFETY: glibc's dlfcn.h declarations.
#[link(name = "dl")]
unsafe extern "C" {
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

/// dlfcn.h (glibc): resolve every symbol at load.
const RTLD_NOW: c_int = 2;

fn query() -> Result<String, (i32, String)> {
    // SAFETY: dlopen takes a NUL-terminated name; libcuda's initialisers
    // run here, in this child process only.
    let lib = unsafe { dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW) };
    if lib.is_null() {
        return Err((1, "libcuda.so.1 cannot be loaded".to_owned()));
    }
    let symbol = |name: &CStr| {
        // SAFETY: @lib is a live handle from dlopen and @name is
        // NUL-terminated.
        let f = unsafe { dlsym(lib, name.as_ptr()) };
        if f.is_null() {
            Err((2, format!("libcuda.so.1 lacks {name:?}")))
        } else {
            Ok(f)
        }
    };
    // SAFETY: each pointer is libcuda's function of that name, whose C
    // signature (cuda.h) is the type it is cast to; CUdevice is an int.
    let (init, count, get, attribute, bus_id) = unsafe {
        (
            std::mem::transmute::<*mut c_void, CuInit>(symbol(c"cuInit")?),
            std::mem::transmute::<*mut c_void, CuDeviceGetCount>(symbol(c"cuDeviceGetCount")?),
            std::mem::transmute::<*mut c_void, CuDeviceGet>(symbol(c"cuDeviceGet")?),
            std::mem::transmute::<*mut c_void, CuDeviceGetAttribute>(symbol(
                c"cuDeviceGetAttribute",
            )?),
            std::mem::transmute::<*mut c_void, CuDeviceGetPciBusId>(symbol(
                c"cuDeviceGetPCIBusId",
            )?),
        )
    };
    let call = |what: &str, result: c_int| {
        if result == 0 {
            Ok(())
        } else {
            Err((2, format!("{what} returned CUresult {result}")))
        }
    };
    // SAFETY: libcuda's functions, called as cuda.h declares them, with
    // pointers to locals that outlive each call and the buffer's true size.
    unsafe {
        call("cuInit", init(0))?;
        let mut n: c_int = 0;
        call("cuDeviceGetCount", count(&mut n))?;
        let mut lines = String::new();
        for ordinal in 0..n {
            let mut device: c_int = 0;
            call("cuDeviceGet", get(&mut device, ordinal))?;
            let mut value: c_int = 0;
            call(
                "cuDeviceGetAttribute",
                attribute(&mut value, GPU_DIRECT_RDMA_SUPPORTED, device),
            )?;
            let mut bus = [0 as c_char; 32];
            call(
                "cuDeviceGetPCIBusId",
                bus_id(bus.as_mut_ptr(), bus.len() as c_int, device),
            )?;
            let bus = CStr::from_ptr(bus.as_ptr()).to_string_lossy();
            lines.push_str(&format!(
                "{bus} gpu_direct_rdma_supported={}\n",
                i32::from(value != 0)
            ));
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_childs_lines() {
        let m = parse(
            "00000000:00:06.0 gpu_direct_rdma_supported=1\n0000:1B:00.0 gpu_direct_rdma_supported=0\n",
        )
        .unwrap();
        assert_eq!(m.get("0000:00:06.0"), Some(&true));
        assert_eq!(m.get("0000:1b:00.0"), Some(&false));
        assert_eq!(parse("0000:00:06.0 gpu_direct_rdma_supported=2\n"), None);
        assert_eq!(parse("libcuda says no\n"), None);
        assert_eq!(parse(""), Some(BTreeMap::new()));
    }
}
