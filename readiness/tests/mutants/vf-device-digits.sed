# mutates readiness/src/nccl_ib.rs: NCCL_IB_MERGE_VFS's second step switched off (a
# VF past function 7, at the next device number, is not placed at its PF).
/^pub fn placed_at(address: &str, merge_vfs: bool) -> String {/a\    let merge_vfs = merge_vfs && false;
