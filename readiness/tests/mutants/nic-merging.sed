# mutates readiness/src/nccl_ib.rs: NCCL's merging of an adapter's functions
# switched off (each RDMA device its own, as with NCCL_IB_MERGE_NICS=0).
/^pub fn merged(taken: &\[Nic\], merge_vfs: bool, merge: bool, max_devs: usize) -> Vec<Nic> {/a\    return taken.to_vec();
