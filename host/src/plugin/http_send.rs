//! Sending a request the HTTP gate admitted: to the very addresses the gate checked, each in
//! turn until one answers, and for HTTPS over TLS that verifies the name the guest asked for.
//!
//! Invariant: the name is never looked up again here, so what the gate checked is what is
//! reached (no second resolution a DNS answer could change in between); a certificate is
//! checked against the requested host name, never against an address.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// Where an admitted request goes.
pub(super) struct Destination {
    /// The addresses the gate checked, in the order the name resolved to them.
    pub addrs: Vec<SocketAddr>,
    /// The host the guest named: the TLS server name.
    pub host: String,
    pub https: bool,
}

/// How long a connection attempt to one address may take when the guest sets no timeout;
/// the call's own wall-clock cap bounds everything anyway.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The web's certificate authorities, for every call.
pub(super) static WEB_TLS: LazyLock<TlsConnector> = LazyLock::new(|| {
    let roots = tokio_rustls::rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    let config = tokio_rustls::rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
});

type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Sends `request` to `destination`; returns the response and the future that drives the
/// connection while the body is read.
pub(super) async fn send(
    mut request: http::Request<WasiBody>,
    destination: &Destination,
    options: Option<RequestOptions>,
    tls: &TlsConnector,
) -> Result<Sent, HttpError> {
    let connect_timeout = options
        .and_then(|options| options.connect_timeout)
        .unwrap_or(CONNECT_TIMEOUT);
    let stream = connect_any(&destination.addrs, connect_timeout).await?;
    let stream: Box<dyn Io> = if destination.https {
        let name = server_name(&destination.host)?;
        let tls_stream = tokio::time::timeout(connect_timeout, tls.connect(name, stream))
            .await
            .map_err(|_| HttpError::ConnectionTimeout)?
            .map_err(HttpError::Tls)?;
        Box::new(tls_stream)
    } else {
        Box::new(stream)
    };
    let (mut sender, connection) = tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)??;
    // On a direct connection the request line carries the path alone.
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    // The connection is driven while the response comes; it may finish first (the server
    // closed it after the response), and then the response is there to take.
    let mut connection = Box::pin(connection);
    let mut sending = Box::pin(sender.send_request(request));
    let (response, connection) = tokio::select! {
        biased;
        response = &mut sending => (response?, Some(connection)),
        ended = &mut connection => {
            ended?;
            (sending.await?, None)
        }
    };
    let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
    let drive = async move {
        match connection {
            Some(connection) => connection.await.map_err(HttpError::from),
            None => Ok(()),
        }
    };
    Ok((response, Box::new(drive)))
}

/// Connects to the first of `addrs` that takes the connection, in order; the error of the last
/// one otherwise. A name that resolves to an address where nothing listens (an IPv6 `localhost`,
/// say) then still reaches the one that does.
pub(super) async fn connect_any(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, HttpError> {
    let mut last = HttpError::DestinationNotFound;
    for addr in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(error)) => {
                tracing::debug!(%addr, "cannot connect: {error}");
                last = HttpError::Connect(error);
            }
            Err(_) => last = HttpError::ConnectionTimeout,
        }
    }
    Err(last)
}

fn server_name(host: &str) -> Result<ServerName<'static>, HttpError> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(ServerName::from(ip));
    }
    ServerName::try_from(host.to_owned()).map_err(HttpError::InvalidDnsNameError)
}

#[cfg(test)]
#[path = "http_send_tests.rs"]
mod tests;
