//! Outgoing HTTP for guests (`wasi:http`), gated by the plugin's allowlist.
//!
//! Invariant: every request a guest sends passes `HttpGate::send_request`,
//! which checks the authority against the allowlist, resolves the name, and
//! refuses addresses outside the public internet unless the pattern was an
//! IP literal or the policy sets `http_allow_private`, and the addresses of
//! the server the host runs, always. The request then goes to the very
//! addresses that were checked, each in turn, with no second lookup; over
//! HTTPS, TLS verifies the name the guest asked for (`http_send.rs`).

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// What a plugin may reach over HTTP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpPolicy {
    pub allow: Vec<HostPattern>,
    /// Allow names that resolve to loopback, private, link-local or other
    /// non-public addresses.
    pub allow_private: bool,
}

/// One allowlist entry: `host`, `host:port`, `*.domain`, `*.domain:port`,
/// an IPv4 literal or a bracketed IPv6 literal, optionally with a port. An
/// entry without a port admits the web's ports only, 80 and 443.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Name(String),
    /// `*.example.com`: any name strictly below `example.com`.
    Below(String),
    Ip(IpAddr),
}

impl FromStr for HostPattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.contains("://") || text.contains('/') {
            return Err(format!(
                "{text:?} is a URL: write the host, e.g. \"example.com\" or \"example.com:8080\""
            ));
        }
        let (host, port) =
            split_host_port(text).ok_or_else(|| format!("{text:?} is not host or host:port"))?;
        let port = match port {
            Some(port) => Some(
                port.parse::<u16>()
                    .map_err(|_| format!("{text:?} has an invalid port"))?,
            ),
            None => None,
        };
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            HostMatch::Ip(ip)
        } else if let Some(domain) = host.strip_prefix("*.") {
            check_name(domain).map_err(|why| format!("{text:?}: {why}"))?;
            HostMatch::Below(domain.to_ascii_lowercase())
        } else {
            check_name(host).map_err(|why| format!("{text:?}: {why}"))?;
            HostMatch::Name(host.to_ascii_lowercase())
        };
        Ok(Self { host, port })
    }
}

fn check_name(name: &str) -> Result<(), &'static str> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if valid {
        Ok(())
    } else {
        Err("not a valid host name")
    }
}

/// Splits `host[:port]` and `[v6][:port]`.
fn split_host_port(text: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port))),
        Some(_) => None,
        None => Some((text, None)),
    }
}

impl HostPattern {
    fn matches(&self, host: &str, port: u16) -> bool {
        match self.port {
            Some(allowed) if allowed != port => return false,
            None if port != 80 && port != 443 => return false,
            _ => {}
        }
        match &self.host {
            HostMatch::Name(name) => host.eq_ignore_ascii_case(name),
            HostMatch::Below(domain) => {
                host.len() > domain.len() + 1
                    && host[host.len() - domain.len()..].eq_ignore_ascii_case(domain)
                    && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
            }
            HostMatch::Ip(ip) => host.parse::<IpAddr>().is_ok_and(|h| h == *ip),
        }
    }
}

impl HttpPolicy {
    /// The pattern that admits `host:port`, if any.
    fn admit(&self, host: &str, port: u16) -> Option<&HostPattern> {
        self.allow
            .iter()
            .find(|pattern| pattern.matches(host, port))
    }
}

/// Addresses a name may resolve to without `http_allow_private`. An IPv6
/// address that carries an IPv4 one (mapped, compatible, NAT64, 6to4) is as
/// public as the address it carries.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (b & 0xc0) == 64) // shared address space (carrier NAT)
                || (a == 198 && (b & 0xfe) == 18) // benchmarking
                || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
                || a >= 240) // reserved, and the broadcast address
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let carried = |high: u16, low: u16| {
                std::net::Ipv4Addr::from((u32::from(high) << 16) | u32::from(low))
            };
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            if segments[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified() {
                // IPv4-compatible `::a.b.c.d`.
                return is_public(IpAddr::V4(carried(segments[6], segments[7])));
            }
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64: the gateway reaches the IPv4 address it carries.
                return is_public(IpAddr::V4(carried(segments[6], segments[7])));
            }
            if segments[0] == 0x2002 {
                // 6to4: the IPv4 address of the relay in bits 16..48.
                return is_public(IpAddr::V4(carried(segments[1], segments[2])));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unique_local()
                || v6.is_unicast_link_local()
                || (segments[0] == 0x64 && segments[1] == 0xff9b) // local-use NAT64 (64:ff9b:1::/48)
                || (segments[0] == 0x2001 && segments[1] == 0) // Teredo
                || (segments[0] == 0x2001 && segments[1] == 0xdb8)) // documentation
        }
    }
}

/// Addresses no plugin may reach whatever its policy: the server this host runs (its API
/// would let a tool answer its own job's waits). Shared by every call of a runtime.
#[derive(Debug, Default)]
pub struct OwnAddresses(RwLock<Vec<SocketAddr>>);

impl OwnAddresses {
    pub fn add(&self, addr: SocketAddr) {
        self.0.write().unwrap_or_else(|e| e.into_inner()).push(addr);
    }

    /// Whether `target` reaches one of them: the address itself, or any local address on its
    /// port when it listens on all of them.
    pub fn covers(&self, target: &SocketAddr) -> bool {
        let own = self.0.read().unwrap_or_else(|e| e.into_inner());
        own.iter().any(|addr| {
            addr == target
                || (addr.port() == target.port()
                    && addr.ip().is_unspecified()
                    && (target.ip().is_loopback() || target.ip().is_unspecified()))
                || (addr.port() == target.port()
                    && addr.ip().is_loopback()
                    && target.ip().is_unspecified())
        })
    }
}

/// The `wasi:http` hooks of one call.
pub struct HttpGate {
    pub policy: Arc<HttpPolicy>,
    pub plugin: Arc<str>,
    pub own: Arc<OwnAddresses>,
    /// False while the instance waits for its call: what it runs before is sent nowhere.
    pub serving: bool,
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpGate {
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        super::sandbox::BODY_CHUNK_BYTES
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> ResponseFuture {
        if !self.serving {
            tracing::warn!(plugin = %self.plugin, "HTTP request denied: the instance serves no call yet");
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let policy = self.policy.clone();
        let plugin = self.plugin.clone();
        let own = self.own.clone();
        Box::new(async move {
            let uri = request.uri().clone();
            let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let Some(pattern) = policy.admit(&host, port) else {
                tracing::warn!(plugin = %plugin, %host, port, "HTTP request denied: not on the allowlist");
                return Err(HttpError::HttpRequestDenied);
            };
            let literal = matches!(pattern.host, HostMatch::Ip(_));
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|err| HttpError::DnsError {
                    rcode: Some(err.to_string()),
                    info_code: None,
                })?
                .collect();
            let permitted = addrs
                .iter()
                .copied()
                .filter(|addr| literal || policy.allow_private || is_public(addr.ip()))
                .collect::<Vec<_>>();
            if permitted.is_empty() {
                tracing::warn!(plugin = %plugin, %host, ?addrs, "HTTP request denied: name resolves to a non-public address");
                return Err(HttpError::DestinationIpProhibited);
            }
            let (own_server, permitted): (Vec<SocketAddr>, Vec<SocketAddr>) =
                permitted.into_iter().partition(|addr| own.covers(addr));
            if permitted.is_empty() {
                tracing::warn!(plugin = %plugin, %host, ?own_server, "HTTP request denied: that is this host's own server");
                return Err(HttpError::DestinationIpProhibited);
            }
            tracing::debug!(plugin = %plugin, %host, ?permitted, "HTTP request allowed");
            let destination = super::http_send::Destination {
                addrs: permitted,
                host,
                https,
            };
            super::http_send::send(request, &destination, options, &super::http_send::WEB_TLS).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_hosts_own_server_is_never_a_destination() {
        let own = OwnAddresses::default();
        own.add("127.0.0.1:7070".parse().unwrap());
        own.add("0.0.0.0:8080".parse().unwrap());
        for reached in [
            "127.0.0.1:7070",
            "0.0.0.0:7070",
            "127.0.0.1:8080",
            "[::1]:8080",
        ] {
            assert!(own.covers(&reached.parse().unwrap()), "{reached}");
        }
        for elsewhere in ["127.0.0.1:7071", "10.0.0.1:7070", "93.184.216.34:80"] {
            assert!(!own.covers(&elsewhere.parse().unwrap()), "{elsewhere}");
        }
    }

    fn pattern(text: &str) -> HostPattern {
        text.parse().unwrap()
    }

    #[test]
    fn patterns_match_host_and_port() {
        assert!(pattern("example.com").matches("EXAMPLE.com", 443));
        assert!(!pattern("example.com").matches("api.example.com", 443));
        assert!(pattern("*.example.com").matches("api.example.com", 80));
        assert!(!pattern("*.example.com").matches("example.com", 80));
        assert!(!pattern("*.example.com").matches("badexample.com", 80));
        assert!(pattern("127.0.0.1:8080").matches("127.0.0.1", 8080));
        assert!(!pattern("127.0.0.1:8080").matches("127.0.0.1", 8081));
        assert!(pattern("[::1]:80").matches("::1", 80));
    }

    #[test]
    fn bad_patterns_say_why() {
        assert!(
            "https://example.com"
                .parse::<HostPattern>()
                .unwrap_err()
                .contains("is a URL")
        );
        assert!(
            "example.com:http"
                .parse::<HostPattern>()
                .unwrap_err()
                .contains("invalid port")
        );
        assert!(
            "exa mple.com"
                .parse::<HostPattern>()
                .unwrap_err()
                .contains("not a valid host name")
        );
        assert!("".parse::<HostPattern>().is_err());
    }

    #[test]
    fn private_ranges_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.4",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "198.18.0.1",
            "198.19.255.254",
            "192.0.0.8",
            "240.0.0.1",
            "255.255.255.255",
            // IPv6 forms that carry a private IPv4 address.
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:a00:1::",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b:1::1",
            "2001:0:4136:e378::1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "2606:4700:4700::1111",
            "64:ff9b::101:101",
            "2002:101:101::1",
            "198.20.0.1",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn an_instance_that_serves_no_call_yet_sends_nothing() {
        use http_body_util::BodyExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let mut gate = HttpGate {
            policy: Arc::new(HttpPolicy {
                allow: vec![pattern(&listener.local_addr().unwrap().to_string())],
                allow_private: false,
            }),
            plugin: "spare".into(),
            own: Arc::default(),
            serving: false,
        };
        let send = |gate: &mut HttpGate| {
            let body = http_body_util::Empty::<hyper::body::Bytes>::new()
                .map_err(|never| match never {})
                .boxed_unsync();
            let request = http::Request::get(&url).body(body).unwrap();
            Box::into_pin(gate.send_request(request, None, Box::new(async { Ok(()) })))
        };
        let refused = send(&mut gate).await;
        assert!(matches!(refused, Err(HttpError::HttpRequestDenied)));
        // The control: once it serves a call, the same request reaches the server.
        gate.serving = true;
        let sent = tokio::spawn(send(&mut gate));
        let accepted = tokio::time::timeout(Duration::from_secs(10), listener.accept()).await;
        assert!(accepted.is_ok_and(|accepted| accepted.is_ok()));
        sent.abort();
    }

    #[test]
    fn an_entry_without_a_port_admits_only_the_webs_ports() {
        assert!(pattern("example.com").matches("example.com", 443));
        assert!(pattern("example.com").matches("example.com", 80));
        assert!(!pattern("example.com").matches("example.com", 22));
        assert!(!pattern("*.example.com").matches("db.example.com", 5432));
        assert!(!pattern("10.0.0.5").matches("10.0.0.5", 6379));
        assert!(pattern("example.com:8443").matches("example.com", 8443));
    }
}
