# mutates readiness/src/nccl_local_net.rs: 2.30.7's merge of up to eight of an
# adapter's functions taken as 2.28.9's four (Rule::max_devs_per_nic).
s/^            Rule::Nccl230 => 8,$/            Rule::Nccl230 => 4,/
