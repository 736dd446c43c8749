//! dma_map's refusals: page sizes other than 64 KiB, incompatible mapping
//! versions, sg allocation failure, driver failure. Each leaves nothing
//! mapped, returns an error and leaves the core's sg_head untouched; the
//! normal teardown afterwards frees everything.

mod common;

use common::{
    Call, Env, Op, PAGE, PAGE_SIZE_4KB, PAGE_SIZE_128KB, PAGE_TABLE_VERSION_535,
    PAGE_TABLE_VERSION_580,
};
use nv_peer_mem::errno::{EBUSY, EINVAL, ENOMEM, Errno};
use nv_peer_mem::platform::{NVIDIA_P2P_DMA_MAPPING_VERSION, NVIDIA_P2P_PAGE_SIZE_64KB};
use nv_peer_mem::{ClientKind, Level};

const SENTINEL: [u64; 4] = [0xaaaa_5555_aaaa_5555, 1, 2, 3];

/// Maps a fresh 3-page registration of `kind` with `setup` applied to the
/// driver first; checks the refusal and tears down.
fn refused(kind: ClientKind, setup: impl Fn(&Env), expected: Errno, expected_calls: &[Call]) {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(3 * PAGE);
    let reg = env.acquire(kind, va, 3 * PAGE).expect("mine");
    env.get_pages(&reg).expect("get_pages");
    reg.set_sg_words(SENTINEL);
    setup(&env);
    sim.take_calls();
    let errors = sim.errors_logged();

    assert_eq!(env.dma_map(&reg), Err(expected));
    assert_eq!(sim.take_calls(), expected_calls);
    assert_eq!(reg.sg_words(), SENTINEL, "sg_head untouched");
    assert_eq!(sim.live_mappings(), 0, "nothing left mapped");
    assert_eq!(sim.live_sg_tables(), 0);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert_eq!(
        sim.errors_logged(),
        errors + 1,
        "the refusal is logged once"
    );

    // The core then puts the pages and releases.
    env.put_pages(&reg);
    env.release(&reg);
    sim.assert_clean();
}

#[test]
fn refuses_4k_pages() {
    for kind in [ClientKind::Mem, ClientKind::Nc] {
        refused(
            kind,
            |e| e.sim().set_page_size_type(PAGE_SIZE_4KB),
            EINVAL,
            &[Call::PageTableVersion, Call::PageSize],
        );
    }
}

#[test]
fn refuses_128k_pages() {
    refused(
        ClientKind::Mem,
        |e| e.sim().set_page_size_type(PAGE_SIZE_128KB),
        EINVAL,
        &[Call::PageTableVersion, Call::PageSize],
    );
}

#[test]
fn refuses_incompatible_mapping_versions_and_unmaps() {
    let mapped_then_unmapped = [
        Call::PageTableVersion,
        Call::PageSize,
        Call::DmaMap,
        Call::MappingVersion,
        Call::DmaUnmap,
    ];
    for version in [
        0x0003_0003, // major newer
        0x0001_0003, // major older
        0x0001_ffff,
        0x0002_0002, // minor older
        0x0002_0000,
        0,
    ] {
        refused(
            ClientKind::Mem,
            |e| e.sim().set_mapping_version(version),
            EINVAL,
            &mapped_then_unmapped,
        );
    }
}

#[test]
fn accepts_same_major_with_same_or_newer_minor() {
    for version in [NVIDIA_P2P_DMA_MAPPING_VERSION, 0x0002_0004, 0x0002_ffff] {
        let env = Env::new();
        let sim = env.sim();
        sim.set_mapping_version(version);
        let va = sim.cuda_malloc(2 * PAGE);
        let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).unwrap();
        env.get_pages(&reg).unwrap();
        assert_eq!(env.dma_map(&reg), Ok(2), "version {version:#x}");
        env.dereg_mr(&reg);
        sim.assert_clean();
    }
}

/// A page table of another layout than the module was built for
/// (nv-p2p.h: the major version differs, or the minor is older) is refused
/// before any field of it is read or anything is mapped: 535's build meets
/// a 580 driver and the reverse, and a future major version.
#[test]
fn refuses_page_tables_of_a_layout_it_was_not_built_for() {
    for (found, built) in [
        (PAGE_TABLE_VERSION_580, PAGE_TABLE_VERSION_535),
        (PAGE_TABLE_VERSION_535, PAGE_TABLE_VERSION_580),
        (0x0003_0000, PAGE_TABLE_VERSION_580), // a future major version
        (0x0001_0001, PAGE_TABLE_VERSION_535), // minor older than built
        (0, PAGE_TABLE_VERSION_535),
    ] {
        for kind in [ClientKind::Mem, ClientKind::Nc] {
            refused(
                kind,
                |e| e.sim().set_page_table_version(found, built),
                EINVAL,
                &[Call::PageTableVersion],
            );
        }
    }
}

#[test]
fn accepts_page_tables_of_the_built_major_with_same_or_newer_minor() {
    for (found, built) in [
        (PAGE_TABLE_VERSION_535, PAGE_TABLE_VERSION_535),
        (0x0001_0007, PAGE_TABLE_VERSION_535),
        (PAGE_TABLE_VERSION_580, PAGE_TABLE_VERSION_580),
        (0x0002_0001, PAGE_TABLE_VERSION_580),
    ] {
        let env = Env::new();
        let sim = env.sim();
        sim.set_page_table_version(found, built);
        let va = sim.cuda_malloc(2 * PAGE);
        let reg = env.acquire(ClientKind::Mem, va, 2 * PAGE).unwrap();
        env.get_pages(&reg).unwrap();
        assert_eq!(
            env.dma_map(&reg),
            Ok(2),
            "table {found:#x}, built {built:#x}"
        );
        env.dereg_mr(&reg);
        sim.assert_clean();
    }
}

#[test]
fn sg_allocation_failure_unmaps() {
    refused(
        ClientKind::Mem,
        |e| e.sim().fail_nth(Op::SgFill, 1, ENOMEM),
        ENOMEM,
        &[
            Call::PageTableVersion,
            Call::PageSize,
            Call::DmaMap,
            Call::MappingVersion,
            Call::SgFill { page_size: PAGE },
            Call::DmaUnmap,
        ],
    );
    refused(
        ClientKind::Nc,
        |e| e.sim().fail_nth(Op::SgFill, 1, ENOMEM),
        ENOMEM,
        &[
            Call::PageTableVersion,
            Call::PageSize,
            Call::DmaMap,
            Call::MappingVersion,
            Call::SgFill { page_size: PAGE },
            Call::DmaUnmap,
        ],
    );
}

#[test]
fn driver_mapping_failure_is_passed_on() {
    refused(
        ClientKind::Mem,
        |e| e.sim().fail_nth(Op::DmaMap, 1, EBUSY),
        EBUSY,
        &[Call::PageTableVersion, Call::PageSize, Call::DmaMap],
    );
}

#[test]
fn refuses_missing_pci_device_sg_table_or_pages() {
    let env = Env::new();
    let sim = env.sim();
    let va = sim.cuda_malloc(PAGE);
    let reg = env.acquire(ClientKind::Mem, va, PAGE).unwrap();
    sim.take_calls();
    let null = std::ptr::null_mut();
    // SAFETY: the registration is live.
    unsafe {
        // Before get_pages: no page table yet.
        assert_eq!(
            env.drv.dma_map(reg.ctx(), reg.sg_head(), common::pci_dev()),
            Err(EINVAL)
        );
        env.get_pages(&reg).unwrap();
        sim.take_calls();
        assert_eq!(env.drv.dma_map(reg.ctx(), reg.sg_head(), null), Err(EINVAL));
        assert_eq!(
            env.drv.dma_map(reg.ctx(), null, common::pci_dev()),
            Err(EINVAL)
        );
    }
    assert!(
        sim.take_calls().is_empty(),
        "refused before asking the driver"
    );
    assert!(sim.logs().iter().filter(|l| l.0 == Level::Error).count() >= 3);
    env.put_pages(&reg);
    env.release(&reg);
    sim.assert_clean();
}

#[test]
fn sixty_four_k_is_what_the_module_expects() {
    assert_eq!(NVIDIA_P2P_PAGE_SIZE_64KB, 1);
    assert_eq!(PAGE, 1 << nv_peer_mem::range::GPU_PAGE_SHIFT);
}
