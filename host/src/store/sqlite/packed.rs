//! The large texts of the SQLite store (a job's state, a save's events and messages) as the
//! file keeps them: compressed in a BLOB, or as TEXT when that is no smaller.
//!
//! Invariant: a BLOB in one of these columns is a format byte and then a zstd frame of UTF-8
//! JSON; format 1 compresses against `vocabulary-1.json`, the JSON maestro writes (its events,
//! messages and job state, with their values left out), whose bytes never change: a new
//! vocabulary comes with a new format byte, and every earlier one stays readable. A TEXT is the
//! JSON itself, so rows written before compression read as they always did.
//!
//! Why: a commit writes every page it touches whole, and a save's row or a job's state that
//! outgrows its page spills onto overflow pages of its own. A small text compresses well only
//! against words it has seen, which a vocabulary gives it: a park's 670 bytes of events take
//! about 105 (about 325 without it), so two or three saves' rows share a leaf (see the README's
//! cycle bench).

use std::cell::RefCell;

use rusqlite::ToSql;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};

/// The words of format 1.
const VOCABULARY_1: &[u8] = include_bytes!("vocabulary-1.json");

/// The format byte of a BLOB compressed against [`VOCABULARY_1`].
const FORMAT_1: u8 = 1;

/// zstd's level. A save's kilobyte or two of events and messages packs to about 145 bytes
/// at 5 and 220 at 1 (a quarter of them go on to share a page, see `rows::log_text`), for a
/// few microseconds more of the writer thread, which every change passes through; past 5
/// small texts shrink no further.
const LEVEL: i32 = 5;

/// Texts shorter than this stay TEXT: there is too little to gain.
const SMALLEST_PACKED: usize = 32;

thread_local! {
    // A context holds the vocabulary loaded: loading it for each text would cost more than
    // compressing the text. `None` when zstd cannot allocate one.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        RefCell::new(zstd::bulk::Compressor::with_dictionary(LEVEL, VOCABULARY_1).ok());
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        RefCell::new(zstd::bulk::Decompressor::with_dictionary(VOCABULARY_1).ok());
}

/// A text as it is bound into a statement.
pub(super) enum Packed<'a> {
    Text(&'a str),
    Blob(Vec<u8>),
}

/// `text` compressed when that makes it smaller; a text too large for [`unpack`] to take back
/// stays TEXT.
pub(super) fn pack(text: &str) -> Packed<'_> {
    if text.len() < SMALLEST_PACKED || text.len() > LARGEST_UNPACKED {
        return Packed::Text(text);
    }
    let frame = COMPRESSOR.with_borrow_mut(|compressor| {
        let compressor = compressor.as_mut()?;
        let mut blob = Vec::with_capacity(1 + zstd::zstd_safe::compress_bound(text.len()));
        blob.push(FORMAT_1);
        // The frame goes after the format byte.
        let mut after_format = std::io::Cursor::new(blob);
        after_format.set_position(1);
        compressor
            .compress_to_buffer(text.as_bytes(), &mut after_format)
            .ok()?;
        Some(after_format.into_inner())
    });
    match frame {
        Some(blob) if blob.len() < text.len() => Packed::Blob(blob),
        // Compressing bytes in memory fails only when it cannot allocate.
        _ => Packed::Text(text),
    }
}

impl Packed<'_> {
    /// The bytes the column holds.
    pub(super) fn len(&self) -> usize {
        match self {
            Packed::Text(text) => text.len(),
            Packed::Blob(blob) => blob.len(),
        }
    }
}

impl ToSql for Packed<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Packed::Text(text) => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
            Packed::Blob(blob) => ToSqlOutput::Borrowed(ValueRef::Blob(blob)),
        })
    }
}

/// A text read back, as [`pack`] wrote it or as a row from before compression holds it; a
/// BLOB that does not unpack is the error, for the caller to name the job it belongs to.
pub(super) struct Unpacked(pub Result<String, String>);

/// The most a packed text may unpack to: far above any state or save (a conversation's whole
/// log is split across saves), and a bound on what a damaged frame can make this allocate.
const LARGEST_UNPACKED: usize = 256 << 20;

impl FromSql for Unpacked {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Text(_) => String::column_result(value).map(|text| Unpacked(Ok(text))),
            ValueRef::Blob(blob) => Ok(Unpacked(unpack(blob).and_then(|bytes| {
                String::from_utf8(bytes).map_err(|e| format!("a packed text: {e}"))
            }))),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

fn unpack(blob: &[u8]) -> Result<Vec<u8>, String> {
    let frame = match blob.split_first() {
        Some((&FORMAT_1, frame)) => frame,
        Some((format, _)) => return Err(format!("a packed text of unknown format {format}")),
        None => return Err("an empty packed text".to_owned()),
    };
    let size = zstd::zstd_safe::get_frame_content_size(frame)
        .map_err(|_| "a packed text that is not a zstd frame".to_owned())?
        .ok_or("a packed text whose frame does not say its size")?;
    let size = usize::try_from(size)
        .ok()
        .filter(|size| *size <= LARGEST_UNPACKED)
        .ok_or_else(|| format!("a packed text of {size} bytes, more than the store writes"))?;
    DECOMPRESSOR.with_borrow_mut(|decompressor| {
        let decompressor = decompressor
            .as_mut()
            .ok_or("no memory to unpack a packed text")?;
        decompressor
            .decompress(frame, size)
            .map_err(|e| format!("a packed text: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> (bool, String) {
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        let packed = pack(text);
        let was_packed = matches!(packed, Packed::Blob(_));
        let back: Unpacked = connection
            .query_row("SELECT ?1", [&packed], |row| row.get(0))
            .unwrap();
        (was_packed, back.0.unwrap())
    }

    /// The events a park saves in the cycle bench, as the store wrote them.
    const PARK: &str = r#"[{"event":"started","piece":"chat","input":"hello","parent":null,"max_burst":12,"acceptance":"user_confirmed","at_ms":1796608046894},{"event":"movement_entered","movement":"chat","count":1,"at_ms":1796608046894},{"event":"model_replied","movement":"chat","text":null,"tool_calls":["complete"],"at_ms":1796608046894},{"event":"tool_called","movement":"chat","call_id":"call-0-0","tool":"complete","arguments":"{\"question\":\"Which city?\",\"status\":\"needs_user_input\"}","at_ms":1796608046894},{"event":"parked","wait":1,"status":"waiting_human","resume_movement":"chat","reason":"input","request":{"kind":"question","question":"Which city?"},"at_ms":1796608046894}]"#;

    #[test]
    fn a_parks_events_take_a_quarter_of_their_bytes_half_what_zstd_alone_makes_and_read_back_the_same()
     {
        let Packed::Blob(blob) = pack(PARK) else {
            panic!("not packed")
        };
        assert_eq!(blob[0], FORMAT_1);
        let alone = zstd::bulk::compress(PARK.as_bytes(), LEVEL).unwrap();
        assert!(
            blob.len() * 4 < PARK.len(),
            "{} of {}",
            blob.len(),
            PARK.len()
        );
        assert!(
            blob.len() * 2 < alone.len(),
            "{} against {}",
            blob.len(),
            alone.len()
        );
        assert_eq!(round_trip(PARK), (true, PARK.to_owned()));
    }

    /// The messages that park saves with [`PARK`].
    const PARK_MESSAGES: &str = r#"[{"role":"user","text":"hello"},{"role":"assistant","tool_calls":[{"id":"call-0-0","name":"complete","arguments":"{\"question\":\"Which city?\",\"status\":\"needs_user_input\"}"}]}]"#;

    #[test]
    fn messages_packed_after_the_events_they_repeat_add_less_than_half_their_own_packing() {
        let size = |text: &str| match pack(text) {
            Packed::Blob(blob) => blob.len(),
            Packed::Text(_) => panic!("not packed: {text}"),
        };
        let (events, messages) = (size(PARK), size(PARK_MESSAGES));
        let together = size(&format!("{PARK}\n{PARK_MESSAGES}"));
        assert!(
            (together - events) * 2 < messages,
            "events {events}, messages {messages}, together {together}"
        );
    }

    #[test]
    fn the_vocabulary_of_format_1_is_the_one_its_rows_were_packed_with() {
        use sha2::Digest;
        // Rows packed with it are in stores: a new vocabulary needs a new format byte.
        assert_eq!(
            hex::encode(sha2::Sha256::digest(VOCABULARY_1)),
            "603c167fe4786eef7ac5431e04956d8be2883a944def218aa2691872aaf5bf41"
        );
    }

    #[test]
    fn short_texts_stay_text_and_rows_of_text_read_as_before() {
        assert_eq!(round_trip("{}"), (false, "{}".to_owned()));
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        let before: Unpacked = connection
            .query_row("SELECT ?1", [PARK], |row| row.get(0))
            .unwrap();
        assert_eq!(before.0.unwrap(), PARK);
    }

    #[test]
    fn a_damaged_or_unknown_blob_reads_as_an_error_not_a_panic() {
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        let read = |blob: &[u8]| {
            connection
                .query_row("SELECT ?1", [blob], |row| row.get::<_, Unpacked>(0))
                .unwrap()
                .0
                .unwrap_err()
        };
        assert_eq!(read(b""), "an empty packed text");
        assert_eq!(read(b"\x02abc"), "a packed text of unknown format 2");
        assert_eq!(
            read(b"\x01not zstd"),
            "a packed text that is not a zstd frame"
        );
        let Packed::Blob(mut blob) = pack(PARK) else {
            panic!("not packed")
        };
        blob.truncate(blob.len() - 8);
        assert!(
            read(&blob).starts_with("a packed text: "),
            "{}",
            read(&blob)
        );
    }
}
