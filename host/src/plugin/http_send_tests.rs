use std::sync::Arc;

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;

/// A certificate authority, and a server certificate it signed for `name`.
fn certificates(
    name: &str,
) -> (
    CertificateDer<'static>,
    CertificateDer<'static>,
    PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (
        ca.der().clone(),
        leaf.der().clone(),
        PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
}

/// A one-request HTTPS server on 127.0.0.1 presenting `leaf`: it answers `hello` to whatever
/// it is sent, and says what the request line was.
async fn https_server(
    leaf: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> (SocketAddr, tokio::task::JoinHandle<Option<String>>) {
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.ok()?;
        let mut tls = acceptor.accept(tcp).await.ok()?;
        let mut seen = Vec::new();
        let mut chunk = [0u8; 1024];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let read = tls.read(&mut chunk).await.ok()?;
            if read == 0 {
                return None;
            }
            seen.extend_from_slice(&chunk[..read]);
        }
        tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
            .await
            .ok()?;
        tls.shutdown().await.ok()?;
        let head = String::from_utf8_lossy(&seen).into_owned();
        Some(head.lines().next().unwrap_or_default().to_owned())
    });
    (addr, served)
}

fn connector(ca: CertificateDer<'static>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

fn get(url: &str) -> http::Request<WasiBody> {
    let body = http_body_util::Empty::<hyper::body::Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync();
    http::Request::get(url)
        .header("host", "maestro.test")
        .body(body)
        .unwrap()
}

#[tokio::test]
async fn https_reaches_the_checked_address_and_verifies_the_name_asked_for() {
    let (ca, leaf, key) = certificates("maestro.test");
    let (addr, served) = https_server(leaf, key).await;
    // `maestro.test` resolves nowhere: the request can only arrive through the address given.
    let destination = Destination {
        addrs: vec![addr],
        host: "maestro.test".into(),
        https: true,
    };
    let url = format!("https://maestro.test:{}/report?q=1", addr.port());
    let (response, drive) = send(get(&url), &destination, None, &connector(ca.clone()))
        .await
        .unwrap_or_else(|error| panic!("{error:?}"));
    tokio::spawn(Box::into_pin(drive));
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hello");
    assert_eq!(
        served.await.unwrap().as_deref(),
        Some("GET /report?q=1 HTTP/1.1"),
        "the request line carries the path alone"
    );

    // A certificate for another name is refused, even from the checked address.
    let (_, leaf, key) = certificates("elsewhere.test");
    let (addr, _served) = https_server(leaf, key).await;
    let destination = Destination {
        addrs: vec![addr],
        host: "maestro.test".into(),
        https: true,
    };
    let url = format!("https://maestro.test:{}/", addr.port());
    let refused = send(get(&url), &destination, None, &connector(ca)).await;
    assert!(
        matches!(refused, Err(HttpError::Tls(_))),
        "{:?}",
        refused.err()
    );
}

#[tokio::test]
async fn a_connection_tries_each_checked_address_in_turn() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Nothing listens on 127.0.0.2 (the loopback network answers there with a refusal), as
    // nothing listens on `::1` for a `localhost` whose server is bound to 127.0.0.1.
    let nobody: SocketAddr = ([127, 0, 0, 2], port).into();
    let somebody: SocketAddr = ([127, 0, 0, 1], port).into();
    let stream = connect_any(&[nobody, somebody], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(stream.peer_addr().unwrap(), somebody);
    let none = connect_any(&[nobody], Duration::from_secs(5)).await;
    assert!(
        matches!(none, Err(HttpError::Connect(_))),
        "{:?}",
        none.err()
    );
}
