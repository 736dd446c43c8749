use super::*;

/// The real files agree.
#[test]
fn the_glue_header_matches_platform_rs_and_kernel_rs() {
    let problems = check_files(crate::workspace::root()).unwrap();
    assert!(
        problems.is_empty(),
        "the C/Rust contract disagrees:\n  {}",
        problems.join("\n  ")
    );
}

/// The real files are parsed into something (a parser that finds
/// nothing would pass the check above vacuously).
#[test]
fn the_real_files_yield_constants_and_functions() {
    let root = crate::workspace::root();
    let header = parse_header(&std::fs::read_to_string(root.join(HEADER)).unwrap()).unwrap();
    let kernel = parse_rust(&std::fs::read_to_string(root.join(KERNEL)).unwrap()).unwrap();
    assert!(header.constants.len() >= 5, "{:?}", header.constants);
    assert!(
        header.functions.len() >= 20,
        "{:?}",
        header.functions.keys()
    );
    assert!(
        kernel.functions.keys().any(|n| n.starts_with("nvpm_rs_"))
            && kernel.functions.keys().any(|n| n.starts_with("nvpm_c_")),
        "{:?}",
        kernel.functions.keys()
    );
}

const HEADER_OK: &str = "/* x */\n#define NVPM_KIND_ONE 0u\n#define NVPM_KIND_TWO_WORDS 1u\n#define NVPM_BUF_SIZE 16\n#define NVPM_LIMIT (1u << 4)\nint nvpm_rs_go(u32 kind, const void *p,\n\tsize_t n);\nvoid *nvpm_c_get(void);\n";
const PLATFORM_OK: &str = "#[repr(u32)]\npub enum Kind {\n    /// one\n    One = 0,\n    TwoWords = 1,\n}\n#[repr(C)]\npub struct Buf(pub [u64; 2]);\npub const LIMIT: u32 = 16;\n";
const KERNEL_OK: &str = "mod ffi {\n    unsafe extern \"C\" {\n        pub fn nvpm_c_get() -> *mut c_void;\n        pub fn panic(fmt: *const u8, ...) -> !;\n    }\n}\nfn nvpm_helper(x: u32) {}\n#[unsafe(no_mangle)]\npub unsafe extern \"C\" fn nvpm_rs_go(\n    kind: u32,\n    p: *const c_void,\n    n: usize,\n) -> i32 {\n    0\n}\n";

#[test]
fn agreeing_files_pass() {
    assert_eq!(
        check(HEADER_OK, PLATFORM_OK, KERNEL_OK).unwrap(),
        Vec::<String>::new()
    );
}

/// Each kind of disagreement is reported, naming the item.
#[test]
fn disagreements_are_named() {
    for (header, platform, kernel, expected) in [
        (
            HEADER_OK.replace("KIND_TWO_WORDS 1u", "KIND_TWO_WORDS 2u"),
            PLATFORM_OK.to_owned(),
            KERNEL_OK.to_owned(),
            "NVPM_KIND_TWO_WORDS is 2",
        ),
        (
            format!("{HEADER_OK}#define NVPM_KIND_THREE 2u\n"),
            PLATFORM_OK.to_owned(),
            KERNEL_OK.to_owned(),
            "NVPM_KIND_THREE has no Rust counterpart",
        ),
        (
            HEADER_OK.to_owned(),
            PLATFORM_OK.replace("[u64; 2]", "[u64; 3]"),
            KERNEL_OK.to_owned(),
            "NVPM_BUF_SIZE is 16",
        ),
        (
            HEADER_OK.to_owned(),
            format!("{PLATFORM_OK}#[repr(u32)]\nenum Other {{\n    A = 0,\n}}\n"),
            KERNEL_OK.to_owned(),
            "enum Other has no NVPM_",
        ),
        (
            HEADER_OK.replace("size_t n", "size_t n, int extra"),
            PLATFORM_OK.to_owned(),
            KERNEL_OK.to_owned(),
            "nvpm_rs_go takes 4 parameters",
        ),
        (
            HEADER_OK.replace("const void *p", "void *p"),
            PLATFORM_OK.to_owned(),
            KERNEL_OK.to_owned(),
            "nvpm_rs_go is",
        ),
        (
            format!("{HEADER_OK}void nvpm_c_new(u64 x);\n"),
            PLATFORM_OK.to_owned(),
            KERNEL_OK.to_owned(),
            "nvpm_c_new is declared in",
        ),
        (
            HEADER_OK.to_owned(),
            PLATFORM_OK.to_owned(),
            KERNEL_OK.replace(
                "pub fn panic",
                "pub fn nvpm_c_more(x: u64);\n        pub fn panic",
            ),
            "nvpm_c_more is an extern \"C\" function",
        ),
    ] {
        let problems = check(&header, &platform, &kernel).unwrap().join("\n");
        assert!(
            problems.contains(expected),
            "expected {expected:?} in:\n{problems}"
        );
    }
}
