//! Headless Chromium for the page tests, driven through chromedriver (Debian's chromium and
//! chromium-driver, which `.ci/install` installs).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::ClientBuilder;
use serde_json::json;

pub struct Chromedriver {
    child: Child,
    url: String,
}

impl Chromedriver {
    /// Starts chromedriver on a free port, again on another if the first was taken meanwhile
    /// (the port is free when picked, not necessarily when chromedriver binds it).
    pub fn start() -> Self {
        for _ in 0..3 {
            if let Some(driver) = Self::start_on_a_free_port() {
                return driver;
            }
        }
        panic!("chromedriver exited at start three times");
    }

    fn start_on_a_free_port() -> Option<Self> {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start chromedriver ({error}): install the Debian packages chromium \
                     and chromium-driver (.ci/install does)"
                )
            });
        let deadline = Instant::now() + super::STATE_WAIT;
        loop {
            let listening = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            // If chromedriver is gone, whatever answered was another listener.
            if child.try_wait().unwrap().is_some() {
                return None;
            }
            if listening {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver never listened on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn browser(driver: &Chromedriver) -> fantoccini::Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({ "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a Chromium session through chromedriver")
}
