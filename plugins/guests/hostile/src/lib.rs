//! Test plugin whose tools misbehave on purpose, so the host's sandbox can be
//! tested against them: endless CPU, sleep, memory and stack use, a panic,
//! oversized output, host resources and host work, state kept in memory, and attempts to reach files, environment variables, the
//! network and child jobs that the policy may or may not grant.
//!
//! `std::hint::black_box` guards every pointless computation: without it the
//! optimizer could prove the work unobservable and delete the very behaviour
//! being tested.

use std::hint::black_box;
use std::io::Read;
use std::time::Duration;

use maestro_guest_v0_1::http;
use maestro_guest_v0_1::serde_json::{Map, Value, json};
use maestro_guest_v0_1::{
    Call, Guest, LoginRequest, Outcome, Park, ToolError, ToolRequest, ToolSpec, host, output_json,
    parse_args, spec,
};
use serde::Deserialize;

/// The body `http_get` keeps; beyond it the test has learned what it needed.
const HTTP_BODY_CAP: usize = 5 * 1024 * 1024;

struct Hostile;

#[derive(Deserialize)]
struct RecurseArgs {
    #[serde(default)]
    in_memory: bool,
}

#[derive(Deserialize)]
struct SleepArgs {
    ms: u64,
}

#[derive(Deserialize)]
struct HugeOutputArgs {
    bytes: usize,
}

#[derive(Deserialize)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
struct UrlArgs {
    url: String,
}

#[derive(Deserialize)]
struct FloodArgs {
    /// Keep every header block alive instead of dropping it.
    keep: bool,
}

#[derive(Deserialize)]
struct RandomArgs {
    bytes: u64,
}

#[derive(Deserialize)]
struct HostCallsArgs {
    count: u64,
}

#[derive(Deserialize)]
struct JobIdsArgs {
    job_ids: Vec<String>,
}

#[derive(Deserialize)]
struct ArgumentsArgs {
    arguments: String,
}

#[derive(Deserialize)]
struct SpawnArgs {
    piece: String,
    input: String,
}

#[derive(Deserialize)]
struct HoldArgs {
    started: String,
    release: String,
}

/// Writes `started`, then holds its instance until a file `release` exists: a call whose
/// overlap with others a test can wait for instead of timing.
fn hold(args: &HoldArgs) -> Result<Outcome, ToolError> {
    write_file(&args.started, "started")?;
    while std::fs::metadata(&args.release).is_err() {
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(Outcome::Output("released".into()))
}

#[derive(Deserialize)]
struct RememberArgs {
    text: String,
}

/// What `remember` keeps: a count in the data segment and a text on the heap, both in the
/// instance's linear memory, which a fresh instance per call must never show again.
static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static REMEMBERED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn remember(text: String) -> Outcome {
    let calls = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let before = REMEMBERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .replace(text);
    output_json(&json!({"calls": calls, "before": before}))
}

#[derive(Deserialize)]
struct MarkArgs {
    mark: String,
}

/// Grows the linear memory by 4 pages, counts the copies of `mark`'s bytes inverted
/// (`!byte`, so the argument itself never matches) anywhere in it, then writes such copies all
/// over the new pages and a leaked heap block: what a reused, unreset memory would show the
/// next call. Returns the copies found and the memory's size in pages.
fn scan_memory(mark: &str) -> Result<Outcome, ToolError> {
    let mark = mark.as_bytes();
    if mark.len() < 8 {
        return Err(ToolError::new("`mark` needs at least 8 bytes", false));
    }
    #[cfg(target_arch = "wasm32")]
    {
        use core::arch::wasm32::{memory_grow, memory_size};
        const SCAN_PAGES: usize = 4;
        let first_new_page = memory_grow(0, SCAN_PAGES);
        if first_new_page == usize::MAX {
            return Err(ToolError::new("memory.grow failed", false));
        }
        let end = memory_size(0) * 65536;
        let byte = |at: usize| unsafe { std::ptr::read_volatile(at as *const u8) };
        let mut found = 0u64;
        for start in 8..end - mark.len() {
            if (0..mark.len()).all(|k| byte(start + k) == !mark[k]) {
                found += 1;
            }
        }
        let fill = |from: usize, len: usize| {
            for at in 0..len {
                unsafe { std::ptr::write_volatile((from + at) as *mut u8, !mark[at % mark.len()]) }
            }
        };
        fill(first_new_page * 65536, SCAN_PAGES * 65536);
        let block = vec![0u8; 64 << 10].leak();
        fill(block.as_mut_ptr() as usize, block.len());
        Ok(output_json(
            &json!({"found": found, "pages": memory_size(0)}),
        ))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Err(ToolError::new(
            "scan_memory reads a wasm linear memory",
            false,
        ))
    }
}

#[derive(Deserialize)]
struct SpawnManyArgs {
    piece: String,
    count: u32,
}

/// A strict object schema with the given properties, all required.
fn object(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false
    });
    // Draft 4 forbids an empty `required`; leave it out for argument-less tools.
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

fn spin() -> ! {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

fn alloc_bomb() -> ! {
    const MIB: usize = 1024 * 1024;
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; MIB];
        // A zeroed allocation may be satisfied by fresh, untouched pages;
        // writing one byte per page makes the memory real.
        for offset in (0..MIB).step_by(4096) {
            block[offset] = 1;
        }
        held.push(black_box(block));
        black_box(&held);
    }
}

/// Recurses until the stack runs out. The per-frame buffer makes each frame
/// big and the addition after the call keeps it from being a tail call.
/// Frames small enough to live in wasm locals: only the engine's wasm stack
/// limit stops it.
fn recurse_native(depth: u64) -> u64 {
    if black_box(depth) == u64::MAX {
        return 0;
    }
    recurse_native(depth + 1).wrapping_add(black_box(1))
}

/// Frames with a buffer, which Rust keeps on the shadow stack in linear
/// memory: overflowing it runs off the bottom of memory.
fn recurse(depth: u64) -> u64 {
    let mut frame = [0u8; 1024];
    frame[(depth % 1024) as usize] = depth as u8;
    black_box(&mut frame);
    // Never true; hidden from the optimizer so the recursion is not
    // "unconditional" and cannot be folded away.
    if black_box(depth) == u64::MAX {
        return 0;
    }
    recurse(depth + 1).wrapping_add(u64::from(frame[(depth % 7) as usize]))
}

/// Makes `wasi:http` header blocks of about 60 KB in a loop, through
/// `fields.from-list`, which needs no grant to reach the host: the memory
/// they take is the host's, outside the guest's linear memory.
fn header_flood(keep: bool) -> Result<Outcome, ToolError> {
    use wasi::http::types::Fields;
    let headers: Vec<(String, Vec<u8>)> = (0..60)
        .map(|index| (format!("x-flood-{index}"), vec![b'a'; 1000]))
        .collect();
    loop {
        let fields = Fields::from_list(&headers)
            .map_err(|err| ToolError::permanent(format!("fields.from-list: {err:?}")))?;
        if keep {
            std::mem::forget(fields);
        } else {
            black_box(fields.entries().len());
        }
    }
}

fn read_file(path: &str) -> Result<Outcome, ToolError> {
    let file =
        std::fs::File::open(path).map_err(|e| ToolError::permanent(format!("open {path}: {e}")))?;
    let mut head = Vec::with_capacity(4096);
    file.take(4096)
        .read_to_end(&mut head)
        .map_err(|e| ToolError::permanent(format!("read {path}: {e}")))?;
    Ok(Outcome::Output(String::from_utf8_lossy(&head).into_owned()))
}

fn write_file(path: &str, content: &str) -> Result<Outcome, ToolError> {
    std::fs::write(path, content)
        .map_err(|e| ToolError::permanent(format!("write {path}: {e}")))?;
    Ok(Outcome::Output(format!("wrote {} bytes", content.len())))
}

fn read_env() -> Outcome {
    let vars: Map<String, Value> = std::env::vars_os()
        .map(|(key, value)| {
            (
                key.to_string_lossy().into_owned(),
                Value::String(value.to_string_lossy().into_owned()),
            )
        })
        .collect();
    output_json(&Value::Object(vars))
}

fn http_get(url: &str) -> Result<Outcome, ToolError> {
    let to_error = |err: http::Error| ToolError::new(err.to_string(), err.is_retryable());
    let url = http::parse_url(url).map_err(to_error)?;
    let response = http::get(&url, &[], HTTP_BODY_CAP).map_err(to_error)?;
    Ok(output_json(&json!({
        "status": response.status,
        "body": String::from_utf8_lossy(&response.body),
    })))
}

impl Guest for Hostile {
    fn describe() -> Vec<ToolSpec> {
        let nothing = || object(json!({}));
        let string = || json!({"type": "string"});
        let count = || json!({"type": "integer", "minimum": 0});
        vec![
            spec("spin", "Loops forever.", nothing()),
            spec(
                "sleep",
                "Sleeps `ms` milliseconds.",
                object(json!({"ms": count()})),
            ),
            spec(
                "alloc_bomb",
                "Allocates and holds 1 MiB blocks until memory runs out.",
                nothing(),
            ),
            spec(
                "recurse",
                "Recurses until a stack overflows: with `in_memory`, frames on the \
                 shadow stack in linear memory; without, the wasm call stack.",
                json!({
                    "type": "object",
                    "properties": {"in_memory": {"type": "boolean"}},
                    "additionalProperties": false
                }),
            ),
            spec("panic", "Panics.", nothing()),
            spec(
                "huge_output",
                "Returns `bytes` bytes of 'x'.",
                object(json!({"bytes": count()})),
            ),
            spec(
                "read_file",
                "Returns the first 4096 bytes of the file at `path`.",
                object(json!({"path": string()})),
            ),
            spec(
                "write_file",
                "Writes `content` to the file at `path`.",
                object(json!({"path": string(), "content": string()})),
            ),
            spec(
                "read_env",
                "Returns every environment variable it can see.",
                nothing(),
            ),
            spec(
                "http_get",
                "GETs `url` through wasi:http and returns its status and body.",
                object(json!({"url": string()})),
            ),
            spec(
                "header_flood",
                "Creates wasi:http header blocks for ever, keeping them if `keep`.",
                object(json!({"keep": {"type": "boolean"}})),
            ),
            spec(
                "random_bytes",
                "Asks the host for `bytes` random bytes and returns how many came.",
                object(json!({"bytes": count()})),
            ),
            spec(
                "host_calls",
                "Makes `count` cheap host calls (get-random-u64).",
                object(json!({"count": count()})),
            ),
            spec(
                "huge_error",
                "Fails with a tool error of `bytes` bytes of 'x'.",
                object(json!({"bytes": count()})),
            ),
            spec(
                "park_subtasks",
                "Parks on the child jobs `job_ids`, whatever they are.",
                object(json!({"job_ids": {"type": "array", "items": string()}})),
            ),
            spec(
                "park_login",
                "Parks for a browser login at `url`, whatever it is.",
                object(json!({"url": string()})),
            ),
            spec(
                "park_tool_request",
                "Parks asking to run `echo` with `arguments` as they are.",
                object(json!({"arguments": string()})),
            ),
            spec(
                "spawn_many",
                "Starts `count` child jobs of `piece` in one call; reports how many started and the first refusal.",
                object(json!({"piece": string(), "count": count()})),
            ),
            spec(
                "spawn_subtask",
                "Asks the host to start a child job running `piece` with `input`.",
                object(json!({"piece": string(), "input": string()})),
            ),
            spec(
                "hold",
                "Writes the file `started`, then waits until the file `release` exists.",
                object(json!({"started": string(), "release": string()})),
            ),
            spec(
                "remember",
                "Keeps `text` and counts its calls in its own memory; returns the count and \
                 the text an earlier call kept, if this instance has one.",
                object(json!({"text": string()})),
            ),
            spec(
                "scan_memory",
                "Counts the copies of `mark` (inverted) in its whole linear memory, then \
                 writes such copies over new pages and a heap block.",
                object(json!({"mark": string()})),
            ),
        ]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        match call.tool.as_str() {
            "spin" => spin(),
            "sleep" => {
                let args: SleepArgs = parse_args(&call)?;
                std::thread::sleep(Duration::from_millis(black_box(args.ms)));
                Ok(Outcome::Output(format!("slept {} ms", args.ms)))
            }
            "alloc_bomb" => alloc_bomb(),
            "recurse" => {
                let depth = if parse_args::<RecurseArgs>(&call)?.in_memory {
                    recurse(0)
                } else {
                    recurse_native(0)
                };
                Ok(Outcome::Output(black_box(depth).to_string()))
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            "huge_output" => {
                let args: HugeOutputArgs = parse_args(&call)?;
                Ok(Outcome::Output("x".repeat(args.bytes)))
            }
            "read_file" => read_file(&parse_args::<PathArgs>(&call)?.path),
            "write_file" => {
                let args: WriteArgs = parse_args(&call)?;
                write_file(&args.path, &args.content)
            }
            "read_env" => Ok(read_env()),
            "http_get" => http_get(&parse_args::<UrlArgs>(&call)?.url),
            "huge_error" => {
                let args: HugeOutputArgs = parse_args(&call)?;
                Err(ToolError::permanent("x".repeat(args.bytes)))
            }
            "park_subtasks" => Ok(Outcome::Park(Park::Subtasks(
                parse_args::<JobIdsArgs>(&call)?.job_ids,
            ))),
            "park_login" => Ok(Outcome::Park(Park::BrowserLogin(LoginRequest {
                url: parse_args::<UrlArgs>(&call)?.url,
                reason: "hostile".into(),
            }))),
            "park_tool_request" => Ok(Outcome::Park(Park::ToolRequest(ToolRequest {
                tool: "echo".into(),
                reason: "hostile".into(),
                arguments: parse_args::<ArgumentsArgs>(&call)?.arguments,
            }))),
            "header_flood" => header_flood(parse_args::<FloodArgs>(&call)?.keep),
            "random_bytes" => {
                let bytes = parse_args::<RandomArgs>(&call)?.bytes;
                let block = wasi::random::random::get_random_bytes(bytes);
                Ok(Outcome::Output(block.len().to_string()))
            }
            "host_calls" => {
                let count = parse_args::<HostCallsArgs>(&call)?.count;
                let mut mix = 0u64;
                for _ in 0..count {
                    mix ^= wasi::random::random::get_random_u64();
                }
                black_box(mix);
                Ok(Outcome::Output(format!("made {count} host calls")))
            }
            "spawn_many" => {
                let args: SpawnManyArgs = parse_args(&call)?;
                let mut started = 0;
                let mut refusal = Value::Null;
                for index in 0..args.count {
                    match host::spawn_subtask(&args.piece, &format!("part {index}")) {
                        Ok(_) => started += 1,
                        Err(error) => {
                            refusal = Value::String(error);
                            break;
                        }
                    }
                }
                Ok(output_json(
                    &json!({"started": started, "refusal": refusal}),
                ))
            }
            "spawn_subtask" => {
                let args: SpawnArgs = parse_args(&call)?;
                host::spawn_subtask(&args.piece, &args.input)
                    .map(Outcome::Output)
                    .map_err(ToolError::permanent)
            }
            "hold" => hold(&parse_args::<HoldArgs>(&call)?),
            "remember" => Ok(remember(parse_args::<RememberArgs>(&call)?.text)),
            "scan_memory" => scan_memory(&parse_args::<MarkArgs>(&call)?.mark),
            _ => Err(ToolError::unknown_tool(&call)),
        }
    }
}

maestro_guest_v0_1::export!(Hostile);
