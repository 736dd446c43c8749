use super::*;

#[test]
fn dkms_conf_variables_are_read_as_dh_dkms_reads_them() {
    let conf = "# x\nPACKAGE_NAME=\"nv_peer_mem\"\nPACKAGE_VERSION='1.4.0'\nOTHER=1\n";
    assert_eq!(dkms_variable(conf, "PACKAGE_NAME").unwrap(), "nv_peer_mem");
    assert_eq!(dkms_variable(conf, "PACKAGE_VERSION").unwrap(), "1.4.0");
    let error = format!("{:#}", dkms_variable(conf, "MISSING").unwrap_err());
    assert!(error.contains("MISSING"), "{error}");
}

#[test]
fn dh_dkms_snippets_get_the_module_name_and_version_between_markers() {
    let postinst = dh_dkms_snippet("postinst", "nv_peer_mem", "1.4.0")
        .unwrap()
        .unwrap();
    assert!(
        postinst.starts_with("# Automatically added by "),
        "{postinst}"
    );
    assert!(postinst.ends_with("# End automatically added section\n"));
    assert!(postinst.contains("DKMS_NAME=nv_peer_mem\n"));
    assert!(postinst.contains("DKMS_VERSION=1.4.0\n"));
    assert!(!postinst.contains("#MODULE_"));
    assert!(dh_dkms_snippet("postrm", "m", "1").unwrap().is_none());
}
