// TextStats: a maestro tool written in C.
//
// Counts the characters (Unicode code points), words, lines and sentences of a text, and finds its
// longest word. Given no text (empty or only whitespace) it parks with `ask` for the text; the
// call resumed with `answered` analyses the answer, `expired` aborts the job.
//
// Built against the bindings that wit-bindgen's C generator writes for the world `plugin` of
// wit/since_v0.1.0 (plugin.h, plugin.c, plugin_component_type.o):
//
//   wit-bindgen c wit/since_v0.1.0 --world plugin --out-dir gen
//   clang-19 --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor -fuse-ld=lld \
//       -I gen text_stats.c gen/plugin.c gen/plugin_component_type.o -o text_stats.core.wasm
//   wasm-tools component new text_stats.core.wasm \
//       --adapt wasi_snapshot_preview1.reactor.wasm -o text_stats.wasm
//
// Ownership follows the bindings: everything returned is malloc'd (the generated post-return
// frees it), and the call record is the tool's to free.

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

#define TOOL_NAME "TextStats"

static const char *PARAMETERS =
    "{\"type\":\"object\","
    "\"properties\":{\"text\":{\"type\":\"string\",\"description\":\"The text to analyse.\"}},"
    "\"required\":[\"text\"],\"additionalProperties\":false}";

static const char *QUESTION =
    "There is no text to analyse. Paste the text you want counted.";

// ---- a growable byte buffer ------------------------------------------------------------------

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} buffer_t;

static void buffer_push(buffer_t *b, const char *bytes, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n + 1) cap *= 2;
        b->data = realloc(b->data, cap);
        if (!b->data) abort();
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buffer_str(buffer_t *b, const char *s) { buffer_push(b, s, strlen(s)); }

static void buffer_byte(buffer_t *b, char c) { buffer_push(b, &c, 1); }

// Appends `bytes` as a JSON string literal.
static void buffer_json_string(buffer_t *b, const char *bytes, size_t n) {
    buffer_byte(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c == '"' || c == '\\') {
            buffer_byte(b, '\\');
            buffer_byte(b, (char)c);
        } else if (c < 0x20) {
            char escape[8];
            snprintf(escape, sizeof escape, "\\u%04x", c);
            buffer_str(b, escape);
        } else {
            buffer_byte(b, (char)c);
        }
    }
    buffer_byte(b, '"');
}

// ---- just enough JSON to read one string member of an object ----------------------------------

typedef struct {
    const char *at;
    const char *end;
} cursor_t;

static void skip_space(cursor_t *c) {
    while (c->at < c->end && isspace((unsigned char)*c->at)) c->at++;
}

static int hex_value(char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
}

static int read_hex4(cursor_t *c, unsigned *out) {
    if (c->end - c->at < 4) return 0;
    unsigned value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_value(c->at[i]);
        if (digit < 0) return 0;
        value = value * 16 + (unsigned)digit;
    }
    c->at += 4;
    *out = value;
    return 1;
}

static void push_utf8(buffer_t *b, unsigned cp) {
    char out[4];
    size_t n;
    if (cp < 0x80) {
        out[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buffer_push(b, out, n);
}

// Reads a JSON string at the cursor into `out` (decoded, NUL-terminated). 0 on malformed input.
static int read_string(cursor_t *c, buffer_t *out) {
    buffer_push(out, "", 0);
    if (c->at >= c->end || *c->at != '"') return 0;
    c->at++;
    while (c->at < c->end) {
        char ch = *c->at++;
        if (ch == '"') return 1;
        if (ch != '\\') {
            buffer_byte(out, ch);
            continue;
        }
        if (c->at >= c->end) return 0;
        char escape = *c->at++;
        switch (escape) {
            case '"': buffer_byte(out, '"'); break;
            case '\\': buffer_byte(out, '\\'); break;
            case '/': buffer_byte(out, '/'); break;
            case 'b': buffer_byte(out, '\b'); break;
            case 'f': buffer_byte(out, '\f'); break;
            case 'n': buffer_byte(out, '\n'); break;
            case 'r': buffer_byte(out, '\r'); break;
            case 't': buffer_byte(out, '\t'); break;
            case 'u': {
                unsigned cp;
                if (!read_hex4(c, &cp)) return 0;
                // A surrogate pair spells one code point above the BMP.
                if (cp >= 0xD800 && cp <= 0xDBFF && c->end - c->at >= 6 && c->at[0] == '\\' &&
                    c->at[1] == 'u') {
                    cursor_t low_at = {c->at + 2, c->end};
                    unsigned low;
                    if (read_hex4(&low_at, &low) && low >= 0xDC00 && low <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        c->at = low_at.at;
                    }
                }
                push_utf8(out, cp);
                break;
            }
            default: return 0;
        }
    }
    return 0;
}

// Skips any JSON value (strings honoured, containers by depth). 0 on malformed input.
static int skip_value(cursor_t *c) {
    skip_space(c);
    if (c->at >= c->end) return 0;
    if (*c->at == '"') {
        buffer_t ignored = {0};
        int ok = read_string(c, &ignored);
        free(ignored.data);
        return ok;
    }
    int depth = 0;
    while (c->at < c->end) {
        char ch = *c->at;
        if (ch == '"') {
            if (!skip_value(c)) return 0;
            continue;
        }
        if (ch == '{' || ch == '[') depth++;
        if (ch == '}' || ch == ']') {
            if (depth == 0) return 1;
            depth--;
        }
        if (ch == ',' && depth == 0) return 1;
        c->at++;
    }
    return depth == 0;
}

// Finds the string member `key` of the JSON object in `json`. 1 found, 0 absent or not a string.
static int string_member(const char *json, size_t len, const char *key, buffer_t *out) {
    cursor_t c = {json, json + len};
    skip_space(&c);
    if (c.at >= c.end || *c.at != '{') return 0;
    c.at++;
    for (;;) {
        skip_space(&c);
        if (c.at < c.end && *c.at == '}') return 0;
        buffer_t name = {0};
        int ok = read_string(&c, &name);
        int wanted = ok && strcmp(name.data, key) == 0;
        free(name.data);
        if (!ok) return 0;
        skip_space(&c);
        if (c.at >= c.end || *c.at != ':') return 0;
        c.at++;
        skip_space(&c);
        if (wanted) return c.at < c.end && *c.at == '"' && read_string(&c, out);
        if (!skip_value(&c)) return 0;
        skip_space(&c);
        if (c.at < c.end && *c.at == ',') {
            c.at++;
            continue;
        }
        return 0;
    }
}

// ---- the analysis --------------------------------------------------------------------------

static int is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Words are runs of anything but ASCII whitespace; sentences end at . ! ? followed by space or
// the end.
static void analyse(const char *text, size_t len, buffer_t *json) {
    size_t characters = 0, words = 0, sentences = 0, lines = len ? 1 : 0;
    size_t word_start = 0, word_len = 0, longest_at = 0, longest_len = 0, longest_chars = 0;
    size_t word_chars = 0;
    int in_word = 0;
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)text[i] : ' ';
        if (i < len && !is_continuation(c)) characters++;
        if (c == '\n' && i + 1 < len) lines++;
        if (isspace(c)) {
            if (in_word) {
                words++;
                if (word_chars > longest_chars) {
                    longest_at = word_start;
                    longest_len = word_len;
                    longest_chars = word_chars;
                }
                unsigned char last = (unsigned char)text[word_start + word_len - 1];
                if (last == '.' || last == '!' || last == '?') sentences++;
            }
            in_word = 0;
        } else {
            if (!in_word) {
                word_start = i;
                word_len = 0;
                word_chars = 0;
            }
            in_word = 1;
            word_len++;
            if (!is_continuation(c)) word_chars++;
        }
    }
    if (words > 0 && sentences == 0) sentences = 1;
    char numbers[160];
    snprintf(numbers, sizeof numbers,
             "{\"characters\":%zu,\"words\":%zu,\"lines\":%zu,\"sentences\":%zu,"
             "\"longest_word\":",
             characters, words, lines, sentences);
    buffer_str(json, numbers);
    buffer_json_string(json, text + longest_at, longest_len);
    buffer_byte(json, '}');
}

static int is_blank(const char *text, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)text[i])) return 0;
    return 1;
}

// ---- the exports ---------------------------------------------------------------------------

void exports_maestro_tool_tool_describe(exports_maestro_tool_tool_list_tool_spec_t *ret) {
    ret->len = 1;
    ret->ptr = malloc(sizeof *ret->ptr);
    if (!ret->ptr) abort();
    plugin_string_dup(&ret->ptr[0].name, TOOL_NAME);
    plugin_string_dup(&ret->ptr[0].description,
                      "Count the characters, words, lines and sentences of a text and find its "
                      "longest word. Asks the user for the text when it is empty.");
    plugin_string_dup(&ret->ptr[0].parameters, PARAMETERS);
}

static void output(exports_maestro_tool_tool_outcome_t *ret, const char *text, size_t len) {
    ret->tag = MAESTRO_TOOL_TYPES_OUTCOME_OUTPUT;
    plugin_string_dup_n(&ret->val.output, text, len);
}

static void tool_error(exports_maestro_tool_tool_tool_error_t *err, const char *message) {
    plugin_string_dup(&err->message, message);
    err->retryable = false;
}

// The text to analyse, or the outcome that stands instead: 1 when `*ret` or `*err` is set.
static int settle(exports_maestro_tool_tool_call_t *call, buffer_t *text,
                  exports_maestro_tool_tool_outcome_t *ret,
                  exports_maestro_tool_tool_tool_error_t *err, bool *failed) {
    if (!call->resume.is_some) {
        if (!string_member((const char *)call->arguments.ptr, call->arguments.len, "text", text)) {
            tool_error(err, "the arguments need a string `text`");
            *failed = true;
            return 1;
        }
        if (!is_blank(text->data, text->len)) return 0;
        ret->tag = MAESTRO_TOOL_TYPES_OUTCOME_PARK;
        ret->val.park.tag = MAESTRO_TOOL_TYPES_PARK_ASK;
        plugin_string_dup(&ret->val.park.val.ask, QUESTION);
        return 1;
    }
    maestro_tool_types_resume_t *resume = &call->resume.val;
    switch (resume->tag) {
        case MAESTRO_TOOL_TYPES_RESUME_ANSWERED:
            buffer_push(text, (const char *)resume->val.answered.ptr, resume->val.answered.len);
            if (!is_blank(text->data, text->len)) return 0;
            // Still nothing: ask again rather than count nothing.
            ret->tag = MAESTRO_TOOL_TYPES_OUTCOME_PARK;
            ret->val.park.tag = MAESTRO_TOOL_TYPES_PARK_ASK;
            plugin_string_dup(&ret->val.park.val.ask, QUESTION);
            return 1;
        case MAESTRO_TOOL_TYPES_RESUME_EXPIRED:
            ret->tag = MAESTRO_TOOL_TYPES_OUTCOME_TERMINAL;
            ret->val.terminal.tag = MAESTRO_TOOL_TYPES_TERMINAL_ABORT;
            plugin_string_dup(&ret->val.terminal.val.abort,
                              "Nobody gave the text to analyse before the question expired.");
            return 1;
        default:
            tool_error(err, TOOL_NAME " can only be resumed with answered or expired");
            *failed = true;
            return 1;
    }
}

bool exports_maestro_tool_tool_invoke(exports_maestro_tool_tool_call_t *call,
                                      exports_maestro_tool_tool_outcome_t *ret,
                                      exports_maestro_tool_tool_tool_error_t *err) {
    bool failed = false;
    buffer_t text = {0};
    buffer_push(&text, "", 0);
    if (!settle(call, &text, ret, err, &failed)) {
        buffer_t json = {0};
        analyse(text.data, text.len, &json);
        output(ret, json.data, json.len);
        free(json.data);
    }
    free(text.data);
    exports_maestro_tool_tool_call_free(call);
    return !failed;
}
