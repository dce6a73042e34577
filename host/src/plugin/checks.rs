//! Load-time checks of a component: what the file is, and whether the tools
//! it describes are valid (each binding module of `wit/` checks the shape of
//! its version's exports).
//!
//! Invariant: each check names what is wrong in words a tool author can act
//! on; none of them runs guest code.

use std::collections::{HashMap, HashSet};

use wasmtime::component::Component;

use super::error::LoadError;
use super::types::ToolSpec;
use super::wit::DescribedTool;

/// Bounds on what `describe` may return.
const MAX_TOOLS: usize = 256;
const MAX_SCHEMA_BYTES: usize = 256 << 10;
/// A description is read by the model on every turn the tool is offered.
const MAX_DESCRIPTION_BYTES: usize = 8 << 10;
/// Descriptions and schemas of all a plugin's tools together.
const MAX_DESCRIBED_BYTES: usize = 1 << 20;
/// Nodes of a schema with its local `$ref`s written out (a reference back into its own path
/// counts once): what validating an argument and sampling one may have to walk.
const MAX_EXPANDED_NODES: usize = 20_000;
/// Nesting of a schema, references followed.
const MAX_SCHEMA_DEPTH: usize = 64;

/// A `LoadError::World` that lists what the component imports and exports.
pub(super) fn world_error(
    component: &Component,
    engine: &wasmtime::Engine,
    detail: String,
) -> LoadError {
    let ty = component.component_type();
    let names = |items: Vec<String>| {
        if items.is_empty() {
            "(nothing)".to_string()
        } else {
            items.join(", ")
        }
    };
    LoadError::World {
        detail,
        imports: names(
            ty.imports(engine)
                .map(|(name, _)| name.to_string())
                .collect(),
        ),
        exports: names(
            ty.exports(engine)
                .map(|(name, _)| name.to_string())
                .collect(),
        ),
    }
}

pub(super) const WRONG_SHAPE: &str = "wrong export shape: ";

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct WrongShape(pub String);

/// Distinguishes components from core modules and non-wasm before the
/// compiler sees them, so the error says what the file is.
pub(super) fn check_header(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).into_owned();
        return Err(LoadError::NotWasm(format!(
            "the file does not start with the wasm magic `\\0asm` (it starts with {shown:?})"
        )));
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => Err(LoadError::CoreModule),
        [_, _, 1, 0] => Ok(()),
        _ => Err(LoadError::NotWasm(format!(
            "unknown wasm version/layer bytes {:02x?}",
            &bytes[4..8]
        ))),
    }
}

/// Checks what `describe` returned and compiles each tool's schema.
pub(super) fn validate_specs(
    described: &[DescribedTool],
    specs: &mut Vec<ToolSpec>,
) -> Result<HashMap<String, jsonschema::Validator>, LoadError> {
    if described.is_empty() {
        return Err(LoadError::InvalidSpec {
            tool: None,
            reason: "the plugin describes no tools".into(),
        });
    }
    if described.len() > MAX_TOOLS {
        return Err(LoadError::InvalidSpec {
            tool: None,
            reason: format!(
                "{} tools is more than the {MAX_TOOLS} allowed",
                described.len()
            ),
        });
    }
    let total: usize = described
        .iter()
        .map(|spec| spec.name.len() + spec.description.len() + spec.parameters.len())
        .sum();
    if total > MAX_DESCRIBED_BYTES {
        return Err(LoadError::InvalidSpec {
            tool: None,
            reason: format!(
                "the tools are described in {total} bytes, more than the {MAX_DESCRIBED_BYTES} allowed"
            ),
        });
    }
    let mut seen = HashSet::new();
    let mut validators = HashMap::new();
    for spec in described {
        let invalid = |reason: String| LoadError::InvalidSpec {
            tool: Some(spec.name.clone()),
            reason,
        };
        if !valid_tool_name(&spec.name) {
            return Err(invalid(
                "a tool name must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$".into(),
            ));
        }
        if !seen.insert(spec.name.clone()) {
            return Err(invalid("the name is used by two tools".into()));
        }
        if spec.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(invalid(format!(
                "the description has {} bytes, more than the {MAX_DESCRIPTION_BYTES} allowed \
                 (the model reads it on every turn)",
                spec.description.len()
            )));
        }
        if spec.parameters.len() > MAX_SCHEMA_BYTES {
            return Err(invalid(format!(
                "parameters schema is larger than {MAX_SCHEMA_BYTES} bytes"
            )));
        }
        let schema: serde_json::Value = serde_json::from_str(&spec.parameters)
            .map_err(|err| invalid(format!("parameters is not JSON: {err}")))?;
        expanded_size(&schema).map_err(|why| invalid(format!("parameters {why}")))?;
        if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(invalid(
                r#"parameters must be a JSON Schema with "type": "object""#.into(),
            ));
        }
        let validator = jsonschema::validator_for(&schema)
            .map_err(|err| invalid(format!("parameters is not a valid JSON Schema: {err}")))?;
        validators.insert(spec.name.clone(), validator);
        specs.push(ToolSpec {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters: schema,
        });
    }
    Ok(validators)
}

/// How many nodes `root` has with its local `$ref`s written out, or why it is too big to use.
/// A reference to a schema already on the path being expanded (recursion) counts as one node,
/// so a recursive schema is finite; one whose references fan out is refused before anything
/// walks it.
fn expanded_size(root: &serde_json::Value) -> Result<usize, String> {
    fn walk<'a>(
        root: &'a serde_json::Value,
        node: &'a serde_json::Value,
        path: &mut Vec<&'a str>,
        count: &mut usize,
    ) -> Result<(), String> {
        *count += 1;
        if *count > MAX_EXPANDED_NODES {
            return Err(format!(
                "expands to more than {MAX_EXPANDED_NODES} nodes once its $refs are followed"
            ));
        }
        if path.len() > MAX_SCHEMA_DEPTH {
            return Err(format!("nests deeper than {MAX_SCHEMA_DEPTH} levels"));
        }
        match node {
            serde_json::Value::Object(map) => {
                if let Some(reference) = map.get("$ref").and_then(|r| r.as_str())
                    && !path.contains(&reference)
                    && let Some(target) = reference
                        .strip_prefix('#')
                        .and_then(|pointer| root.pointer(pointer))
                {
                    path.push(reference);
                    walk(root, target, path, count)?;
                    path.pop();
                }
                for value in map.values() {
                    path.push("");
                    let walked = walk(root, value, path, count);
                    path.pop();
                    walked?;
                }
            }
            serde_json::Value::Array(items) => {
                for value in items {
                    path.push("");
                    let walked = walk(root, value, path, count);
                    path.pop();
                    walked?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    let mut count = 0;
    walk(root, root, &mut Vec::new(), &mut count)?;
    Ok(count)
}

fn valid_tool_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tells_core_modules_components_and_garbage_apart() {
        assert!(matches!(
            check_header(b"\0asm\x01\0\0\0rest"),
            Err(LoadError::CoreModule)
        ));
        assert!(check_header(b"\0asm\x0d\0\x01\0rest").is_ok());
        assert!(matches!(
            check_header(b"hello world, not wasm"),
            Err(LoadError::NotWasm(_))
        ));
        assert!(matches!(check_header(b"\0as"), Err(LoadError::NotWasm(_))));
    }

    #[test]
    fn tool_names_are_checked() {
        assert!(valid_tool_name("BrowseWeb"));
        assert!(valid_tool_name("read_file-2"));
        assert!(!valid_tool_name("2fast"));
        assert!(!valid_tool_name("has space"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(65)));
    }

    fn spec(name: &str, parameters: &str) -> DescribedTool {
        DescribedTool {
            name: name.into(),
            description: "d".into(),
            parameters: parameters.into(),
        }
    }

    fn spec_error(described: &[DescribedTool]) -> String {
        validate_specs(described, &mut Vec::new())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn specs_are_validated() {
        let object = r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1}}}"#;
        let mut specs = Vec::new();
        let validators =
            validate_specs(&[spec("a", object), spec("b", object)], &mut specs).unwrap();
        assert_eq!(specs.len(), 2);
        assert!(validators["a"].is_valid(&serde_json::json!({"n": 3})));
        assert!(!validators["a"].is_valid(&serde_json::json!({"n": 0})));

        assert!(spec_error(&[]).contains("no tools"));
        assert!(
            spec_error(&[spec("a", object), spec("a", object)])
                .contains("`a`: the name is used by two tools")
        );
        assert!(spec_error(&[spec("bad name", object)]).contains("must match"));
        let mut wordy = spec("a", object);
        wordy.description = "d".repeat(MAX_DESCRIPTION_BYTES + 1);
        assert!(spec_error(&[wordy]).contains("the description has 8193 bytes"));
        let many: Vec<_> = (0..200)
            .map(|n| {
                let mut big = spec(&format!("t{n}"), object);
                big.description = "d".repeat(MAX_DESCRIPTION_BYTES);
                big
            })
            .collect();
        assert!(spec_error(&many).contains("more than the 1048576 allowed"));

        // A recursive schema is fine; references that fan out are refused before any walk.
        let tree = r##"{"type":"object","properties":{"root":{"$ref":"#/$defs/node"}},
            "$defs":{"node":{"type":"object","properties":{
                "children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}"##;
        assert!(validate_specs(&[spec("tree", tree)], &mut Vec::new()).is_ok());
        let mut defs = String::from(r#""d0":{"type":"string"}"#);
        for level in 1..20 {
            let below = level - 1;
            defs.push_str(&format!(
                r##","d{level}":{{"type":"object","properties":{{"a":{{"$ref":"#/$defs/d{below}"}},"b":{{"$ref":"#/$defs/d{below}"}}}}}}"##
            ));
        }
        let fan = format!(
            r##"{{"type":"object","properties":{{"x":{{"$ref":"#/$defs/d19"}}}},"$defs":{{{defs}}}}}"##
        );
        assert!(
            spec_error(&[spec("fan", &fan)]).contains("expands to more than 20000 nodes"),
            "{}",
            spec_error(&[spec("fan", &fan)])
        );
        let mut deep = String::from(r#"{"type":"string"}"#);
        for _ in 0..40 {
            deep = format!(r#"{{"type":"object","properties":{{"n":{deep}}}}}"#);
        }
        assert!(spec_error(&[spec("deep", &deep)]).contains("nests deeper than 64 levels"));
        assert!(spec_error(&[spec("a", "{not json")]).contains("not JSON"));
        assert!(spec_error(&[spec("a", r#"{"type":"string"}"#)]).contains(r#""type": "object""#));
        assert!(
            spec_error(&[spec(
                "a",
                r#"{"type":"object","properties":{"n":{"type":"nope"}}}"#
            )])
            .contains("not a valid JSON Schema")
        );
    }
}
