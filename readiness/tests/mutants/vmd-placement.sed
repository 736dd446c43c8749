# mutates readiness/src/topology.rs: VMD placement switched off (NCCL is taken to
# find every device's sysfs path, five-digit domains included).
/^pub fn nccl_finds(address: &str) -> bool {/a\    return true;
