# mutates readiness/src/topology.rs: a Broadcom Gen5 switch's lower level taken by
# its vendor and device alone (its subsystem ids, which getBcmGen reads, ignored).
/^pub fn bcm_generation(ids: \[u16; 4\], level: u64) -> Option<u8> {/a\    if ids[0] == 0x1000 && ids[1] == 0xc030 { return Some(5); }
