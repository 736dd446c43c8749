# mutates readiness/src/pxn.rs: PXN's relay taken whatever its NVLinks'
# bandwidth against the GPU's own NIC (outweighs).
s/^    nvlink_bw.min(peer_to_nic) >= own_best$/    let _ = (nvlink_bw, peer_to_nic, own_best);\n    true/
