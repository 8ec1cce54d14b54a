//! The fleet view (`/ui`) in a real browser: headless Chromium, driven over the DevTools
//! protocol, against real `starling node` processes, fleetsim and `git daemon`. The page must
//! show the right counts, draw the last rollout's chart from the history when opened after it,
//! size its cells to the fleet (30, 1,000 and 10,000 clusters), change the colour of its cells
//! when a commit rolls out without reloading, and draw 10,000 cells within a time measured in
//! the browser. Screenshots go to
//! `target/tmp/test-artifacts/` (and to `docs/fleet-view.png` with
//! `STARLING_UPDATE_SCREENSHOT=1`).
//!
//! Chromium comes from `scripts/test`, which installs Debian's `chromium` when it is missing;
//! `STARLING_CHROMIUM` names another binary.

mod harness;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use harness::{Group, Options, demo_fixture, demo_manifests, wait_until};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const CLUSTERS: usize = 30;
/// The time the browser may take to draw 10,000 cells.
const RENDER_BOUND_MS: f64 = 2000.0;
const GREEN: &str = "#2ea043";

fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("STARLING_CHROMIUM") {
        return PathBuf::from(path);
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .map(|name| Path::new("/usr/bin").join(name))
        .find(|path| path.is_file())
        .expect(
            "the fleet view test needs Chromium: scripts/test installs Debian's chromium \
             (apt-get install chromium), or set STARLING_CHROMIUM",
        )
}

/// Headless Chromium, killed on drop.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    port: u16,
}

impl Browser {
    fn start() -> Browser {
        let profile = tempfile::tempdir().expect("profile directory");
        let child = Command::new(chromium())
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1400,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        // Chromium writes the port it chose to DevToolsActivePort.
        let file = profile.path().join("DevToolsActivePort");
        let started = Instant::now();
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|text| text.lines().next()?.trim().parse().ok())
            {
                break port;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromium did not open its DevTools port"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        Browser {
            child,
            _profile: profile,
            port,
        }
    }

    /// Opens `url` in a new tab; its DevTools websocket address.
    fn open(&self, url: &str) -> String {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("devtools port");
        write!(
            stream,
            "PUT /json/new?{url} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.port
        )
        .expect("request");
        // Chromium keeps the connection open: read the head, then Content-Length bytes.
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut response = Vec::new();
        let mut buffer = [0u8; 4096];
        let body = loop {
            let read = stream.read(&mut buffer).expect("devtools answers");
            assert!(read > 0, "devtools closed the connection early");
            response.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&response).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .expect("a content length");
                if body.len() >= length {
                    break body[..length].to_owned();
                }
            }
        };
        let target: Value = serde_json::from_str(&body).expect("target json");
        target["webSocketDebuggerUrl"]
            .as_str()
            .expect("a debugger url")
            .to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A DevTools session with one page.
struct Page {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
}

impl Page {
    async fn connect(address: &str) -> Page {
        let (socket, _) = tokio_tungstenite::connect_async(address)
            .await
            .expect("devtools websocket");
        Page { socket, next_id: 0 }
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::text(request.to_string()))
            .await
            .expect("send");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let message = tokio::time::timeout_at(deadline.into(), self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method}"))
                .expect("socket open")
                .expect("message");
            let Message::Text(text) = message else {
                continue;
            };
            let reply: Value = serde_json::from_str(&text).expect("json");
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{method} failed: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page.
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression} threw: {result}"
        );
        result["result"]["value"].clone()
    }

    async fn wait_for(&mut self, what: &str, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.eval(expression).await != json!(true) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&mut self, name: &str) -> PathBuf {
        let result = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64_decode(result["data"].as_str().expect("png data"));
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-artifacts");
        std::fs::create_dir_all(&dir).expect("artifact directory");
        let path = dir.join(name);
        std::fs::write(&path, &png).expect("write screenshot");
        path
    }
}

/// Standard base64, as DevTools sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            other => panic!("not base64: {other}"),
        }
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_view_shows_the_fleet_live_and_draws_ten_thousand_cells_quickly() {
    let fixture = demo_fixture(fleetsim::Config {
        clusters: CLUSTERS,
        ready_delay: Duration::from_millis(400),
        ..Default::default()
    })
    .await;
    let (sim, demo, url) = (&fixture.sim, &fixture.repo, fixture.url.clone());
    let group = Group::start(3, Options::default()).await;
    group
        .apply(
            1,
            &demo_manifests(
                sim,
                &url,
                "",
                "    maxUnavailable: 4\n    partitions: [{matchLabels: {region: r0}}]\n",
            ),
        )
        .await
        .expect("specs applied");
    wait_until(Duration::from_secs(120), "v1 everywhere", || async {
        group
            .rollout("demo")
            .await
            .is_some_and(|r| r.phase == "Complete")
    })
    .await;

    let browser = Browser::start();
    let node = group.running().next().expect("a node").http.clone();
    let mut page = Page::connect(&browser.open(&format!("http://{node}/ui"))).await;
    page.wait_for(
        "the page to show every cluster updated",
        &format!(
            "window.starlingView && starlingView.ready && starlingView.counts.updated === {CLUSTERS}"
        ),
    )
    .await;
    let counts = page.eval("starlingView.counts").await;
    assert_eq!(counts["total"], CLUSTERS, "{counts}");
    assert_eq!(counts["failed"], 0, "{counts}");
    let pixels = page.eval("starling.cellPixels()").await;
    let pixels = pixels.as_array().expect("cell colours");
    assert_eq!(pixels.len(), CLUSTERS);
    assert!(pixels.iter().all(|p| p == GREEN), "{pixels:?}");

    // The page opened after the rollout: its chart is drawn from the rollout history, with a
    // count axis from 0 and a time axis, and its caption above the plot, clear of the lines.
    let chart = page.eval("starlingView.timeline").await;
    assert!(chart["points"].as_u64().unwrap_or(0) >= 1, "{chart}");
    let labels: Vec<&str> = chart["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(labels.contains(&"0"), "{labels:?}");
    assert!(
        labels.contains(&CLUSTERS.to_string().as_str()),
        "{labels:?}"
    );
    assert!(
        labels
            .iter()
            .filter(|l| l.matches(':').count() == 2)
            .count()
            >= 2,
        "a time axis: {labels:?}"
    );
    assert!(
        chart["captionBottom"].as_f64() < chart["plotTop"].as_f64(),
        "{chart}"
    );
    // Cells sized to the fleet: 30 clusters get large, named cells, and all of them fit.
    let layout = page.eval("starlingView.layout").await;
    assert!(layout["cell"].as_u64().unwrap_or(0) >= 48, "{layout}");
    assert!(
        layout["height"].as_f64() <= layout["room"].as_f64(),
        "{layout}"
    );
    page.screenshot("fleet-view-30.png").await;

    // A commit rolls out: cells change colour while the page stays the same document.
    page.eval("window.__notReloaded = true").await;
    demo.commit("v2", "nginx:1.28", "v2").expect("commit");
    page.wait_for(
        "cells to change colour",
        &format!("starling.cellPixels().some((p) => p !== '{GREEN}')"),
    )
    .await;
    let shot = page.screenshot("fleet-view-rollout.png").await;
    if std::env::var_os("STARLING_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fleet-view.png");
        std::fs::copy(&shot, docs).expect("copy the screenshot to docs");
    }
    page.wait_for(
        "the rollout to complete on the page",
        &format!(
            "starlingView.counts.updated === {CLUSTERS} && starling.cellPixels().every((p) => p === '{GREEN}')"
        ),
    )
    .await;
    assert_eq!(
        page.eval("window.__notReloaded === true").await,
        json!(true),
        "the page reloaded"
    );
    let status = group.rollout("demo").await.expect("rollout");
    assert_eq!(status.phase, "Complete");
    page.screenshot("fleet-view-complete.png").await;

    // 10,000 cells, timed in the browser.
    let elapsed = page
        .eval("starling.render(starling.synthetic(10000))")
        .await
        .as_f64()
        .expect("milliseconds");
    eprintln!("the browser drew 10,000 cells in {elapsed:.1} ms");
    assert!(
        elapsed < RENDER_BOUND_MS,
        "10,000 cells took {elapsed:.0} ms to draw"
    );
    assert_eq!(page.eval("starlingView.cells").await, json!(10_000));
    page.screenshot("fleet-view-10000.png").await;
    // Small cells for a large fleet, every one of them in the window; the same at 1,000.
    for (clusters, smallest) in [(10_000, 3), (1_000, 10)] {
        if clusters != 10_000 {
            page.eval(&format!("starling.render(starling.synthetic({clusters}))"))
                .await;
            page.screenshot(&format!("fleet-view-{clusters}.png")).await;
        }
        let layout = page.eval("starlingView.layout").await;
        assert!(
            layout["cell"].as_u64().unwrap_or(0) >= smallest,
            "{clusters}: {layout}"
        );
        assert!(
            layout["height"].as_f64() <= layout["room"].as_f64(),
            "{clusters} cells do not fit in the window: {layout}"
        );
    }

    // Back to the fleet; a click on a cell shows that cluster's details.
    page.eval("fetch('/ui/api/snapshot').then((r) => r.json()).then((s) => starling.render(s))")
        .await;
    page.eval(
        "(() => { const at = starling.cellCentre(0); document.getElementById('cells')\
         .dispatchEvent(new MouseEvent('click', {clientX: at.x, clientY: at.y, bubbles: true})); })()",
    )
    .await;
    page.wait_for(
        "the details of the clicked cluster",
        "document.getElementById('details').textContent.includes('Revisions')",
    )
    .await;
    let details = page
        .eval("document.getElementById('details').textContent")
        .await;
    assert!(
        details.as_str().is_some_and(|d| d.contains("Updated")),
        "{details}"
    );
}
