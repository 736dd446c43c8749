# mutates readiness/src/check.rs: NCCL's flattening of Broadcom PEX89000 two-level
# switches switched off (bcm_upper_switch finds no upper switch).
/^fn bcm_upper_switch(/a\    return None;
