//! Arguments made up from a tool's JSON Schema: a valid object to call the tool with, and invalid
//! ones the host must refuse before the tool runs.
//!
//! Invariant: nothing here is trusted blindly: the caller validates every sample against the
//! schema and uses a "valid" one only if it validates, an "invalid" one only if it does not.

use serde_json::{Map, Value, json};

/// How many properties a valid sample fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Only the required ones.
    Required,
    /// Every property the schema names.
    All,
    /// Only the required ones, strings as short and numbers as small as the schema allows:
    /// the edge where tools tend to ask for more.
    Blank,
}

/// `$ref`s followed before giving up on a recursive schema.
const MAX_DEPTH: usize = 12;

/// A value the schema should accept.
pub fn valid(root: &Value, fill: Fill) -> Value {
    Sampler { root, fill }.value(root, 0)
}

/// Values the schema should refuse, most telling first: a required property left out, a property
/// of the wrong type, an unknown property where none is allowed, and not an object at all.
pub fn invalid(root: &Value) -> Vec<(String, Value)> {
    let schema = resolve(root, root, 0);
    let base = valid(root, Fill::Required);
    let mut candidates = Vec::new();
    if let (Some(required), Value::Object(object)) = (schema.get("required"), &base)
        && let Some(name) = required.as_array().and_then(|r| r.first()?.as_str())
    {
        let mut without = object.clone();
        without.remove(name);
        candidates.push((
            format!("the required `{name}` left out"),
            Value::Object(without),
        ));
    }
    if let (Some(Value::Object(properties)), Value::Object(object)) =
        (schema.get("properties"), &base)
    {
        for (name, property) in properties {
            let property = resolve(root, property, 0);
            let wrong = match type_of(property) {
                Some("string") => json!(12345),
                Some("number" | "integer" | "boolean" | "array" | "object") => {
                    json!("not the right type")
                }
                _ => continue,
            };
            let mut changed = object.clone();
            changed.insert(name.clone(), wrong);
            candidates.push((
                format!("`{name}` of the wrong type"),
                Value::Object(changed),
            ));
            break;
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false))
        && let Value::Object(object) = &base
    {
        let mut extra = object.clone();
        extra.insert("maestro_check_unexpected".into(), json!(true));
        candidates.push(("an unknown property".into(), Value::Object(extra)));
    }
    candidates.push(("an array instead of an object".into(), json!([])));
    candidates
}

struct Sampler<'a> {
    root: &'a Value,
    fill: Fill,
}

impl Sampler<'_> {
    fn value(&self, schema: &Value, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        let schema = resolve(self.root, schema, depth);
        let Value::Object(keywords) = schema else {
            // `true` or an empty schema accepts anything.
            return json!({});
        };
        if let Some(value) = keywords.get("const") {
            return value.clone();
        }
        // The author's examples first: they are how a tool steers the kit to its parks.
        for key in ["examples", "default", "enum"] {
            if self.fill == Fill::Blank && key != "enum" {
                continue;
            }
            match (key, keywords.get(key)) {
                ("default", Some(value)) => return value.clone(),
                // Two examples reach two outcomes: the required-only sample takes the first,
                // the every-property sample the last.
                ("examples", Some(Value::Array(values))) if self.fill == Fill::All => {
                    if let Some(last) = values.last() {
                        return last.clone();
                    }
                }
                (_, Some(Value::Array(values))) if !values.is_empty() => return values[0].clone(),
                _ => {}
            }
        }
        for key in ["oneOf", "anyOf", "allOf"] {
            if let Some(first) = keywords
                .get(key)
                .and_then(Value::as_array)
                .and_then(|a| a.first())
            {
                return self.value(first, depth + 1);
            }
        }
        match type_of(schema) {
            Some("object") => self.object(keywords, depth),
            Some("array") => self.array(keywords, depth),
            Some("string") => string(keywords, self.fill),
            Some("integer") => number(keywords, true, self.fill),
            Some("number") => number(keywords, false, self.fill),
            Some("boolean") => json!(true),
            Some("null") => Value::Null,
            _ if keywords.contains_key("properties") => self.object(keywords, depth),
            _ => json!({}),
        }
    }

    fn object(&self, keywords: &Map<String, Value>, depth: usize) -> Value {
        let required: Vec<&str> = keywords
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut object = Map::new();
        if let Some(Value::Object(properties)) = keywords.get("properties") {
            // Optional properties only in the upper half of the depth budget, so that what they
            // require below them still fits: an optional recursion ends, it is not cut to null.
            let optional = self.fill == Fill::All && depth < MAX_DEPTH / 2;
            for (name, property) in properties {
                if optional || required.contains(&name.as_str()) {
                    object.insert(name.clone(), self.value(property, depth + 1));
                }
            }
        }
        Value::Object(object)
    }

    fn array(&self, keywords: &Map<String, Value>, depth: usize) -> Value {
        let min = keywords
            .get("minItems")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        let count = match self.fill {
            Fill::Required | Fill::Blank => min,
            Fill::All => min.max(1),
        };
        let mut items = Vec::new();
        if let Some(Value::Array(prefix)) = keywords.get("prefixItems") {
            items.extend(prefix.iter().map(|item| self.value(item, depth + 1)));
        }
        let item_schema = keywords.get("items").cloned().unwrap_or(json!({}));
        while items.len() < count {
            let mut item = self.value(&item_schema, depth + 1);
            // uniqueItems: make copies differ where they can.
            if let Value::String(text) = &mut item
                && !items.is_empty()
            {
                text.push_str(&items.len().to_string());
            }
            items.push(item);
        }
        Value::Array(items)
    }
}

fn string(keywords: &Map<String, Value>, fill: Fill) -> Value {
    let text = match keywords.get("format").and_then(Value::as_str) {
        _ if fill == Fill::Blank => "",
        Some("date-time") => "2026-01-01T12:00:00Z",
        Some("date") => "2026-01-01",
        Some("time") => "12:00:00Z",
        Some("email") => "someone@example.com",
        Some("uri" | "url" | "iri") => "http://127.0.0.1/",
        Some("uuid") => "00000000-0000-4000-8000-000000000000",
        Some("ipv4") => "127.0.0.1",
        _ => "example",
    };
    let mut text = text.to_owned();
    let min = keywords
        .get("minLength")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    while text.chars().count() < min {
        text.push('x');
    }
    if let Some(max) = keywords.get("maxLength").and_then(Value::as_u64) {
        text = text.chars().take(max as usize).collect();
    }
    Value::String(text)
}

fn number(keywords: &Map<String, Value>, integer: bool, fill: Fill) -> Value {
    let bound = |key: &str| keywords.get(key).and_then(Value::as_f64);
    let mut value = if fill == Fill::Blank { 0.0 } else { 1.0_f64 };
    if let Some(min) = bound("minimum") {
        value = value.max(min);
    }
    if let Some(min) = bound("exclusiveMinimum") {
        value = value.max(min + 1.0);
    }
    if let Some(max) = bound("maximum") {
        value = value.min(max);
    }
    if let Some(max) = bound("exclusiveMaximum") {
        value = value.min(max - if integer { 1.0 } else { 0.5 });
    }
    if integer {
        json!(value.ceil() as i64)
    } else {
        json!(value)
    }
}

/// The schema's type, the first non-null one when it lists several.
fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(name) => Some(name),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .find(|name| *name != "null"),
        _ => None,
    }
}

/// Follows a local `$ref` (`#/…`); anything else is returned as it is.
fn resolve<'a>(root: &'a Value, schema: &'a Value, depth: usize) -> &'a Value {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    if depth > MAX_DEPTH {
        return schema;
    }
    match reference
        .strip_prefix('#')
        .and_then(|pointer| root.pointer(pointer))
    {
        Some(target) => resolve(root, target, depth + 1),
        None => schema,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validates(schema: &Value, value: &Value) -> bool {
        jsonschema::validator_for(schema).unwrap().is_valid(value)
    }

    #[test]
    fn samples_of_typical_tool_schemas_validate() {
        let schemas = [
            json!({"type":"object","properties":{"url":{"type":"string","format":"uri"}},"required":["url"]}),
            json!({"type":"object","properties":{"value":{"type":"number","exclusiveMinimum":0},
                "from":{"type":"string","minLength":1},"precision":{"type":"integer","minimum":0,"maximum":12}},
                "required":["value","from"],"additionalProperties":false}),
            json!({"type":"object","properties":{"rows":{"type":"array","items":{"type":"object"},"minItems":1},
                "columns":{"type":"array","items":{"type":"string","minLength":1},"minItems":1,"uniqueItems":true},
                "mode":{"enum":["preview","publish"]}},"required":["rows"]}),
            json!({"type":"object","$defs":{"id":{"type":"string","pattern":"^[a-z]+$"}},
                "properties":{"ids":{"type":"array","items":{"$ref":"#/$defs/id"}}}}),
            json!({"type":"object","properties":{},"additionalProperties":false}),
        ];
        for schema in &schemas {
            for fill in [Fill::Required, Fill::All, Fill::Blank] {
                let sample = valid(schema, fill);
                assert!(validates(schema, &sample), "{schema} rejects {sample}");
            }
        }
    }

    #[test]
    fn invalid_samples_are_refused_by_their_schema() {
        let schema = json!({"type":"object","properties":{"text":{"type":"string"}},
            "required":["text"],"additionalProperties":false});
        let candidates = invalid(&schema);
        let labels: Vec<&str> = candidates.iter().map(|(label, _)| label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "the required `text` left out",
                "`text` of the wrong type",
                "an unknown property",
                "an array instead of an object"
            ]
        );
        for (label, value) in &candidates {
            assert!(!validates(&schema, value), "{label}: {value}");
        }
    }

    #[test]
    fn a_schema_that_requires_endless_recursion_ends_in_a_sample_it_refuses() {
        // No finite value has a `child` all the way down: the sampler stops, and the kit
        // reports that it could not make up arguments (it never loops).
        let schema = json!({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
            "properties":{"child":{"$ref":"#/$defs/node"}},"required":["child"]}}});
        for fill in [Fill::Required, Fill::All, Fill::Blank] {
            let sample = valid(&schema, fill);
            assert!(sample.is_object(), "{fill:?}: {sample}");
            assert!(!validates(&schema, &sample), "{fill:?}: {sample}");
        }
    }

    #[test]
    fn a_schema_with_optional_recursion_gets_samples_it_accepts() {
        let schema = json!({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
            "properties":{"name":{"type":"string"},"child":{"$ref":"#/$defs/node"}},
            "required":["name"]}}});
        for fill in [Fill::Required, Fill::All, Fill::Blank] {
            let sample = valid(&schema, fill);
            assert!(validates(&schema, &sample), "{fill:?}: {sample}");
        }
        assert!(valid(&schema, Fill::All)["child"].is_object());
    }
}
