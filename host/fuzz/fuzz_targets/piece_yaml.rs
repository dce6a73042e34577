//! Any text as a piece file: it parses (and then lints), or the refusal points at a line of it.
//! Never a panic.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match maestro::piece::parse_piece(text, "piece.yaml") {
        Ok(piece) => {
            let tools: BTreeSet<String> = ["complete", "RequestTool"].map(String::from).into();
            for finding in maestro::piece::lint(&piece, &tools) {
                assert!(!finding.to_string().is_empty());
            }
        }
        Err(error) => {
            let at = error.position().expect("a parse error has a position");
            // YAML breaks lines at `\n`, `\r\n` and a lone `\r` alike (`str::lines` does not
            // know the last): found by this target.
            let lines = text.replace("\r\n", "\n").matches(['\n', '\r']).count() as u64 + 1;
            assert!((1..=lines).contains(&at.line), "{error} (of {lines} lines)");
        }
    }
});
