//! A stock kernel: the host owns the balloon (QMP) and knows the guest's size; the guest
//! does not, so its samples carry zero for both and the agent only reports.

use super::{Backend, FileError, WriteError};
use autoballoon_core::Kib;

pub struct HostOwned;

impl Backend for HostOwned {
    fn name(&self) -> &'static str {
        "host"
    }
    fn size(&self) -> Result<(Kib, Kib), FileError> {
        Ok((Kib::ZERO, Kib::ZERO))
    }
    fn target_in_force(&self) -> Result<Option<Kib>, FileError> {
        Ok(None)
    }
    fn set_guest_size(&self, _: Kib) -> Result<(), WriteError> {
        Err(WriteError::HostOwned)
    }
    fn agent_decides(&self) -> bool {
        false
    }
}
