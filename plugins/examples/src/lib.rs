//! maestro's example tools, one per guest language, built from source by `build.rs`:
//! [`CONFIRM`] (hand-written WAT), [`TEXT_STATS`] (C), [`CONVERT_UNITS`] (Python) and
//! [`RENDER_TABLE`] (JavaScript), all in [`DIR`] (`<cargo target dir>/plugins/examples`).

include!(concat!(env!("OUT_DIR"), "/examples.rs"));
