//! Module parameters and their validation, done before anything is
//! registered so that a bad value changes nothing.
//!
//! Both parameters mean what they mean in NVIDIA's current nvidia-peermem
//! (NVIDIA/open-gpu-kernel-modules, `kernel-open/nvidia-peermem/
//! nvidia-peermem.c`, since 560.28.03); docs/contracts.md has the details.

use crate::platform::{ClientKind, RegistrationStyle};

/// `peerdirect_support=0`: MLNX_OFED >= 5.1, new-style client with
/// `PEER_MEM_INVALIDATE_UNMAPS`.
pub const PEERDIRECT_SUPPORT_DEFAULT: i32 = 0;
/// `peerdirect_support=1`: the legacy PeerDirect API of MLNX_OFED 4.9 LTS
/// and 5.0 (no ex_size/flags).
pub const PEERDIRECT_SUPPORT_LEGACY: i32 = 1;

/// `persistent_api_support=0`: the invalidating client `nv_mem` plus the
/// persistent client under the name `nv_mem_nc`.
pub const PERSISTENT_API_SUPPORT_LEGACY: i32 = 0;
/// `persistent_api_support=1`: only the persistent client, under the name
/// `nv_mem` (nvidia-peermem: "so that libraries can use the persistent
/// client under the same name").
pub const PERSISTENT_API_SUPPORT_DEFAULT: i32 = 1;

/// The name of the invalidating client, and of the persistent one when it
/// is registered alone.
pub const NAME_NV_MEM: &str = "nv_mem";
/// The name of the persistent client next to the invalidating one.
pub const NAME_NV_MEM_NC: &str = "nv_mem_nc";

/// Which clients the module registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// `persistent_api_support=1` (default): the persistent client alone,
    /// named `nv_mem`.
    PersistentOnly,
    /// `persistent_api_support=0`: `nv_mem` (invalidating) and `nv_mem_nc`
    /// (persistent).
    Both,
    /// The NVIDIA header the module was built against has no persistent
    /// API: `nv_mem` (invalidating) alone, whatever `persistent_api_support`
    /// says.
    InvalidatingOnly,
}

impl Clients {
    /// The clients to register, in order, with the name each registers
    /// under.
    pub fn to_register(self) -> &'static [(ClientKind, &'static str)] {
        match self {
            Clients::PersistentOnly => &[(ClientKind::Nc, NAME_NV_MEM)],
            Clients::Both => &[
                (ClientKind::Mem, NAME_NV_MEM),
                (ClientKind::Nc, NAME_NV_MEM_NC),
            ],
            Clients::InvalidatingOnly => &[(ClientKind::Mem, NAME_NV_MEM)],
        }
    }
}

/// The validated parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// How the invalidating client announces itself (the persistent client
    /// is always a plain client: it has nothing to invalidate).
    pub style: RegistrationStyle,
    pub clients: Clients,
}

/// Why a parameter value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError {
    PeerDirectSupport(i32),
    PersistentApiSupport(i32),
}

impl Params {
    /// Validates the raw values, `peerdirect_support` first (as
    /// nvidia-peermem does). `persistent_available` says whether the NVIDIA
    /// header the module was built against offers the persistent-pages API.
    pub fn from_raw(
        peerdirect_support: i32,
        persistent_api_support: i32,
        persistent_available: bool,
    ) -> Result<Params, ParamError> {
        let style = match peerdirect_support {
            PEERDIRECT_SUPPORT_DEFAULT => RegistrationStyle::InvalidateUnmaps,
            PEERDIRECT_SUPPORT_LEGACY => RegistrationStyle::Legacy,
            other => return Err(ParamError::PeerDirectSupport(other)),
        };
        let clients = match (persistent_api_support, persistent_available) {
            (PERSISTENT_API_SUPPORT_LEGACY | PERSISTENT_API_SUPPORT_DEFAULT, false) => {
                Clients::InvalidatingOnly
            }
            (PERSISTENT_API_SUPPORT_DEFAULT, true) => Clients::PersistentOnly,
            (PERSISTENT_API_SUPPORT_LEGACY, true) => Clients::Both,
            (other, _) => return Err(ParamError::PersistentApiSupport(other)),
        };
        Ok(Params { style, clients })
    }
}
