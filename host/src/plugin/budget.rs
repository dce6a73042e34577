//! The compile budget: what one component may ask of the compiler.
//!
//! Invariant: nothing is compiled that is larger than [`MAX_COMPONENT_BYTES`], or holds a
//! function over [`MAX_FUNCTION_OPERATORS`] operators or [`MAX_FUNCTION_WEIGHT`] (its locals
//! times its operators), or whose functions weigh over [`MAX_COMPONENT_WEIGHT`] together. The
//! measure is taken on the bytes, before anything is compiled, with the parser wasmtime itself
//! compiles with.
//!
//! Why these measures: Cranelift's register allocation grows faster than linearly with a
//! function's locals and operators. Here, one function of 5,000 locals and 120,000 operators took
//! 80 s to compile, 1,000 × 40,000 took 4 s, while the largest function of the Python and
//! JavaScript guests weighs 4.2 M (118 × 35,446) and compiles in milliseconds. The bounds leave
//! the largest real guests ten times their size; what they let through compiles in seconds.

use std::io::Read;
use std::path::Path;

use wasmparser::{Encoding, Parser, Payload, TypeRef};

use super::error::LoadError;

/// The largest component file loaded (the Python guest, with CPython inside, is 19 MB).
pub const MAX_COMPONENT_BYTES: usize = 128 << 20;
/// Operators in one function (the largest in the Python guest has 166,865).
pub const MAX_FUNCTION_OPERATORS: u64 = 500_000;
/// Locals × operators of one function (4.2 M at most in the guests built here).
pub const MAX_FUNCTION_WEIGHT: u64 = 50_000_000;
/// The weights of all functions of a component together (61 M for the JavaScript guest).
pub const MAX_COMPONENT_WEIGHT: u64 = 400_000_000;

/// Reads a component file, refusing one larger than [`MAX_COMPONENT_BYTES`] before it is all
/// in memory.
pub fn read_component(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_COMPONENT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the file is larger than the {} MiB a component may be",
                MAX_COMPONENT_BYTES >> 20
            ),
        ));
    }
    Ok(bytes)
}

/// Refuses a component over the budget, naming the function that is. Bytes the parser cannot
/// read are left for the compiler, which says what is wrong with them.
pub(super) fn check_compile_budget(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(LoadError::TooComplex(format!(
            "the component is {} MiB; at most {} MiB are compiled",
            bytes.len() >> 20,
            MAX_COMPONENT_BYTES >> 20
        )));
    }
    let mut total: u64 = 0;
    // Core modules in the order they appear, with their imported functions: a body's function
    // index counts those first.
    let (mut module, mut imported, mut body) = (0usize, 0u64, 0u64);
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            return Ok(());
        };
        match payload {
            Payload::Version {
                encoding: Encoding::Module,
                ..
            } => {
                module += 1;
                (imported, body) = (0, 0);
            }
            Payload::ImportSection(imports) => {
                for import in imports.into_imports().flatten() {
                    if matches!(import.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                        imported += 1;
                    }
                }
            }
            Payload::CodeSectionEntry(function) => {
                let Ok(cost) = FunctionCost::of(&function) else {
                    return Ok(());
                };
                let at = || {
                    format!(
                        "function {} of core module {module} ({} locals, {} operators)",
                        imported + body,
                        cost.locals,
                        cost.operators
                    )
                };
                if cost.operators > MAX_FUNCTION_OPERATORS {
                    return Err(LoadError::TooComplex(format!(
                        "{} has more than {MAX_FUNCTION_OPERATORS} operators",
                        at()
                    )));
                }
                if cost.weight() > MAX_FUNCTION_WEIGHT {
                    return Err(LoadError::TooComplex(format!(
                        "{} weighs {} (locals × operators); at most {MAX_FUNCTION_WEIGHT} are \
                         compiled: split the function, or keep fewer values in locals",
                        at(),
                        cost.weight()
                    )));
                }
                total = total.saturating_add(cost.weight());
                if total > MAX_COMPONENT_WEIGHT {
                    return Err(LoadError::TooComplex(format!(
                        "its functions weigh more than {MAX_COMPONENT_WEIGHT} together (locals × \
                         operators, summed); the limit is reached at {}",
                        at()
                    )));
                }
                body += 1;
            }
            _ => {}
        }
    }
    Ok(())
}

struct FunctionCost {
    locals: u64,
    operators: u64,
}

impl FunctionCost {
    fn of(function: &wasmparser::FunctionBody<'_>) -> wasmparser::Result<Self> {
        let mut locals: u64 = 0;
        for group in function.get_locals_reader()? {
            locals = locals.saturating_add(u64::from(group?.0));
        }
        let mut operators: u64 = 0;
        let mut reader = function.get_operators_reader()?;
        while !reader.eof() {
            reader.read()?;
            operators += 1;
            if operators > MAX_FUNCTION_OPERATORS {
                break;
            }
        }
        Ok(Self { locals, operators })
    }

    /// What the compiler's time grows with. A function without locals still costs its length.
    fn weight(&self) -> u64 {
        self.locals.max(1).saturating_mul(self.operators)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component whose one core module has a function of `locals` locals and `steps` times
    /// four operators that keep them all in use.
    fn component_with(locals: u32, steps: u32) -> Vec<u8> {
        let mut body = String::new();
        for step in 0..steps {
            let (a, b, c) = (
                step * 7 % locals,
                (step * 13 + 1) % locals,
                (step * 31 + 3) % locals,
            );
            body.push_str(&format!(
                "local.get {a} local.get {b} i32.add local.set {c}\n"
            ));
        }
        let locals = "i32 ".repeat(locals as usize);
        let text =
            format!("(component (core module (func (export \"f\") (local {locals}) {body})))");
        wat::parse_str(text).unwrap()
    }

    #[test]
    fn a_function_within_the_budget_passes() {
        check_compile_budget(&component_with(100, 1_000)).unwrap();
    }

    #[test]
    fn a_function_of_many_locals_and_operators_is_refused_before_compiling() {
        // 5,000 × 20,000: the shape that took 80 s to compile at 120,000 operators.
        let error = check_compile_budget(&component_with(5_000, 5_000)).unwrap_err();
        assert_eq!(error.code(), "too-complex");
        let message = error.to_string();
        assert!(
            message.contains("function 0 of core module 1 (5000 locals, 20001 operators)"),
            "{message}"
        );
        assert!(message.contains("weighs 100005000"), "{message}");
    }

    #[test]
    fn a_function_past_the_operator_limit_is_refused_whatever_its_locals() {
        let error = check_compile_budget(&component_with(1, 130_000)).unwrap_err();
        assert!(
            error.to_string().contains("more than 500000 operators"),
            "{error}"
        );
    }

    #[test]
    fn many_heavy_functions_are_refused_together() {
        // 10,000 locals × 4,499 operators: each function alone is within the bound, ten are not.
        let body = (0..2_249)
            .map(|step| {
                format!(
                    "local.get {} local.set {}\n",
                    step % 1_000,
                    (step + 1) % 1_000
                )
            })
            .collect::<String>();
        let locals = "i32 ".repeat(10_000);
        let function = format!("(func (local {locals}) {body})");
        let text = format!("(component (core module {}))", function.repeat(10));
        let error = check_compile_budget(&wat::parse_str(&text).unwrap()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("the limit is reached at function 8 of core module 1"),
            "{error}"
        );
        let eight = format!("(component (core module {}))", function.repeat(8));
        check_compile_budget(&wat::parse_str(&eight).unwrap()).unwrap();
    }

    #[test]
    fn a_file_over_the_size_limit_is_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.wasm");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_COMPONENT_BYTES as u64 + 1).unwrap();
        let error = read_component(&path).unwrap_err();
        assert!(
            error.to_string().contains("larger than the 128 MiB"),
            "{error}"
        );
    }
}
