# mutates readiness/src/check.rs: PXN's relayed paths weighed as unbounded,
# whatever their NVLinks' bandwidth against the GPU's own NICs (settle).
s/^                (Some(i), _) => (nic.clone(), PathType::Pxn, widths\[i\]),$/                (Some(_), _) => (nic.clone(), PathType::Pxn, f64::MAX),/
