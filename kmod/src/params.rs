//! Module parameters and their validation, done before anything is
//! registered so that a bad value changes nothing.

use crate::platform::RegistrationStyle;

/// `peerdirect_support=0`: MLNX_OFED >= 5.1, new-style client with
/// `PEER_MEM_INVALIDATE_UNMAPS`.
pub const PEERDIRECT_SUPPORT_DEFAULT: i32 = 0;
/// `peerdirect_support=1`: the legacy PeerDirect API of MLNX_OFED 4.9 LTS
/// and 5.0 (no ex_size/flags).
pub const PEERDIRECT_SUPPORT_LEGACY: i32 = 1;

/// The validated parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub style: RegistrationStyle,
    /// Register the `nv_mem_nc` client (persistent pages).
    pub persistent: bool,
}

/// Why a parameter value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError {
    PeerDirectSupport(i32),
}

impl Params {
    /// Validates the raw values. `nc_available` says whether the NVIDIA
    /// header the module was built against offers the persistent-pages API;
    /// without it `persistent_api_support=1` simply has nothing to enable.
    pub fn from_raw(
        peerdirect_support: i32,
        persistent_api_support: i32,
        nc_available: bool,
    ) -> Result<Params, ParamError> {
        let style = match peerdirect_support {
            PEERDIRECT_SUPPORT_DEFAULT => RegistrationStyle::InvalidateUnmaps,
            PEERDIRECT_SUPPORT_LEGACY => RegistrationStyle::Legacy,
            other => return Err(ParamError::PeerDirectSupport(other)),
        };
        Ok(Params {
            style,
            persistent: nc_available && persistent_api_support != 0,
        })
    }
}
