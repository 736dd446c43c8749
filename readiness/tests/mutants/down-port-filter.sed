# mutates readiness/src/rdma.rs: the port state filter switched off (every port of
# a known link layer counts as one NCCL's IB plugin takes, ACTIVE or not).
/^    pub fn active(&self) -> bool {/a\        return matches!(self.link_layer.as_str(), "InfiniBand" | "Ethernet");
