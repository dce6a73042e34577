//! maestro's example tools, one per guest language, built from source by `build.rs`:
//! [`CONFIRM`] (hand-written WAT), [`TEXT_STATS`] (C), [`CONVERT_UNITS`] (Python) and
//! [`RENDER_TABLE`] (JavaScript), all in [`DIR`] (`<cargo target dir>/plugins/examples`).
//! [`STAMP`] (WAT) is a fixture: it answers `stamp-v000`, three digits that the hot-reload test
//! and bench patch to make versions. [`BARE_ECHO`] (WAT) is the runtime bench's `echo` with no
//! imports at all, to compare the host's cost with bare wasmtime's.

include!(concat!(env!("OUT_DIR"), "/examples.rs"));

/// The Stamp component patched to answer `stamp-v{version:03}`: a distinct, valid component
/// (with its own content hash) per version.
pub fn stamp_version(version: u16) -> Vec<u8> {
    assert!(version < 1000, "the stamp has three digits");
    let mut bytes = std::fs::read(STAMP).unwrap_or_else(|err| panic!("cannot read {STAMP}: {err}"));
    let marker = b"stamp-v000";
    let at = bytes
        .windows(marker.len())
        .position(|window| window == marker)
        .expect("the stamp's data segment");
    bytes[at + 7..at + 10].copy_from_slice(format!("{version:03}").as_bytes());
    bytes
}
