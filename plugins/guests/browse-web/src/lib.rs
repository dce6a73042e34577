//! First-party tool `BrowseWeb`: fetch a web page over `wasi:http` and return
//! its title and readable text. When the page is behind a login, the job
//! parks until a human logs in through a browser; the resumed call fetches
//! the page again with the session cookie the login produced.

mod text;

use maestro_guest_v0_1::http::{self, Response, Url};
use maestro_guest_v0_1::serde_json::{Value, json};
use maestro_guest_v0_1::{
    Call, Guest, LoginRequest, Outcome, Park, Resume, ToolError, ToolSpec, output_json, parse_args,
    spec,
};
use scraper::Html;
use serde::Deserialize;

const TOOL: &str = "BrowseWeb";
const USER_AGENT: &str = "maestro-browseweb/0.1";
const ACCEPT: &str = "text/html,text/plain;q=0.9,*/*;q=0.5";
/// Bodies past this are cut: far more text than a model can use, and it
/// bounds the memory a single page can make the plugin use.
const MAX_BODY: usize = 5 * 1024 * 1024;
const MAX_REDIRECTS: usize = 5;
const DEFAULT_MAX_CHARS: usize = 20_000;
const MAX_MAX_CHARS: usize = 200_000;

struct BrowseWeb;

#[derive(Deserialize)]
struct Args {
    url: String,
    #[serde(default)]
    max_chars: Option<usize>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "description": "Absolute http or https URL of the page."
            },
            "max_chars": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_MAX_CHARS,
                "default": DEFAULT_MAX_CHARS,
                "description": "Return at most this many characters of text."
            }
        },
        "required": ["url"],
        "additionalProperties": false
    })
}

/// What fetching the page led to.
enum Fetched {
    Page(Value),
    /// The site wants a logged-in human; `url` is where to log in.
    LoginWall {
        url: Url,
        why: String,
    },
}

fn http_error(err: http::Error) -> ToolError {
    ToolError::new(err.to_string(), err.is_retryable())
}

/// GETs `start`, following up to [`MAX_REDIRECTS`] redirects. Returns the
/// URL that answered last with its response.
///
/// `cookie` goes with every request to `start`'s origin (scheme, host and
/// port), redirects included, but never elsewhere: the session belongs to the
/// site the human logged in to, and a redirect to another host — or to the same
/// host on another scheme or port, which may be another service — must not
/// leak it.
fn get_following_redirects(
    start: &Url,
    cookie: Option<&str>,
) -> Result<(Url, Response), ToolError> {
    let mut url = start.clone();
    let mut redirects = 0;
    loop {
        let mut headers = vec![("user-agent", USER_AGENT), ("accept", ACCEPT)];
        if let Some(cookie) = cookie
            && same_origin(&url, start)
        {
            headers.push(("cookie", cookie));
        }
        let response = http::get(&url, &headers, MAX_BODY).map_err(http_error)?;
        if !matches!(response.status, 301 | 302 | 303 | 307 | 308) {
            return Ok((url, response));
        }
        // A redirect without a target is just a non-2xx answer.
        let Some(location) = response.header("location").map(str::trim) else {
            return Ok((url, response));
        };
        if redirects == MAX_REDIRECTS {
            return Err(ToolError::permanent(format!(
                "{start}: gave up after {MAX_REDIRECTS} redirects (last to {location})"
            )));
        }
        let next = url.join(location).map_err(|err| {
            ToolError::permanent(format!(
                "{url} redirected to an invalid URL {location:?}: {err}"
            ))
        })?;
        if !matches!(next.scheme(), "http" | "https") {
            return Err(ToolError::permanent(format!(
                "{url} redirected to {next}, which is not an http or https URL"
            )));
        }
        url = next;
        redirects += 1;
    }
}

/// Whether two URLs share scheme, host and port (a default port counts as
/// written): where a site's session may go.
fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// How to read a body, from its declared type or, lacking one, a look at it.
enum Kind {
    Html,
    Text,
}

fn kind_of(url: &Url, response: &Response) -> Result<Kind, ToolError> {
    let Some(media) = response.media_type() else {
        let head = String::from_utf8_lossy(&response.body[..response.body.len().min(512)])
            .trim_start()
            .to_ascii_lowercase();
        return Ok(
            if head.starts_with("<!doctype html") || head.starts_with("<html") {
                Kind::Html
            } else {
                Kind::Text
            },
        );
    };
    let textual = media.starts_with("text/")
        || matches!(
            media.as_str(),
            "application/json" | "application/xml" | "application/javascript"
        )
        || media.ends_with("+json")
        || media.ends_with("+xml");
    if media == "text/html" || media == "application/xhtml+xml" {
        Ok(Kind::Html)
    } else if textual {
        Ok(Kind::Text)
    } else {
        Err(ToolError::permanent(format!(
            "{url} is {media}, which {TOOL} cannot show as text"
        )))
    }
}

/// Cuts `text` to at most `max_chars` characters, on a char boundary.
fn truncate_chars(text: &mut String, max_chars: usize) -> bool {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => {
            text.truncate(cut);
            true
        }
        None => false,
    }
}

fn fetch(target: &Url, cookie: Option<&str>, max_chars: usize) -> Result<Fetched, ToolError> {
    let (url, response) = get_following_redirects(target, cookie)?;
    let status = response.status;
    if status == 401 || status == 403 {
        return Ok(Fetched::LoginWall {
            why: format!("{url} answered HTTP {status} and needs a logged-in session"),
            url,
        });
    }
    if !(200..300).contains(&status) {
        return Err(ToolError::new(
            format!("{url} answered HTTP {status}"),
            status == 429 || status >= 500,
        ));
    }
    let body = String::from_utf8_lossy(&response.body);
    let (title, mut text) = match kind_of(&url, &response)? {
        Kind::Html => {
            let doc = Html::parse_document(&body);
            if text::has_password_form(&doc) {
                return Ok(Fetched::LoginWall {
                    why: format!("{url} shows a login form"),
                    url,
                });
            }
            (text::title(&doc), text::readable_text(&doc))
        }
        Kind::Text => (String::new(), body.into_owned()),
    };
    let truncated = truncate_chars(&mut text, max_chars) | response.body_truncated;
    Ok(Fetched::Page(json!({
        "url": url.as_str(),
        "status": status,
        "title": title,
        "text": text,
        "truncated": truncated,
    })))
}

fn park_for_login(url: Url, why: String) -> Outcome {
    Outcome::Park(Park::BrowserLogin(LoginRequest {
        url: url.into(),
        reason: why,
    }))
}

impl Guest for BrowseWeb {
    fn describe() -> Vec<ToolSpec> {
        vec![spec(
            TOOL,
            "Fetch a web page (http or https) and return its title and readable text. If the page needs a login, a human is asked to log in first and the page is then fetched with their session.",
            schema(),
        )]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        if call.tool != TOOL {
            return Err(ToolError::unknown_tool(&call));
        }
        let args: Args = parse_args(&call)?;
        let max_chars = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS);
        if !(1..=MAX_MAX_CHARS).contains(&max_chars) {
            return Err(ToolError::permanent(format!(
                "max_chars must be between 1 and {MAX_MAX_CHARS}, not {max_chars}"
            )));
        }
        let target = http::parse_url(&args.url).map_err(http_error)?;

        match &call.resume {
            None => match fetch(&target, None, max_chars)? {
                Fetched::Page(page) => Ok(output_json(&page)),
                Fetched::LoginWall { url, why } => Ok(park_for_login(
                    url,
                    format!("Log in so that {TOOL} can read {target}: {why}."),
                )),
            },
            Some(Resume::LoggedIn(session)) => match fetch(&target, Some(session), max_chars)? {
                Fetched::Page(page) => Ok(output_json(&page)),
                Fetched::LoginWall { url, why } => Ok(park_for_login(
                    url,
                    format!(
                        "The session from the last login was not accepted: {why}. Log in again so that {TOOL} can read {target}."
                    ),
                )),
            },
            Some(Resume::Expired) => Err(ToolError::permanent(format!(
                "no one logged in to read {target} before the wait expired"
            ))),
            Some(other) => Err(ToolError::cannot_resume(TOOL, other)),
        }
    }
}

maestro_guest_v0_1::export!(BrowseWeb);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_char_boundaries() {
        let mut text = "héllo wörld".to_owned();
        assert!(!truncate_chars(&mut text, 11));
        assert!(truncate_chars(&mut text, 2));
        assert_eq!(text, "hé");
    }

    #[test]
    fn the_session_goes_only_to_the_origin_it_belongs_to() {
        let url = |text: &str| Url::parse(text).unwrap();
        let start = url("https://example.com/report");
        assert!(same_origin(
            &url("https://example.com/login?next=1"),
            &start
        ));
        assert!(same_origin(&url("https://example.com:443/"), &start));
        assert!(!same_origin(&url("http://example.com/report"), &start));
        assert!(!same_origin(
            &url("https://example.com:8443/report"),
            &start
        ));
        assert!(!same_origin(&url("https://api.example.com/report"), &start));
    }
}
