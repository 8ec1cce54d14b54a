//! Plain HTTP/1.1 on loopback for the multi-process tests: GET and POST against a node's
//! HTTP port (health, metrics, webhooks), each with a short time limit.

use std::time::Duration;

/// A plain HTTP/1.1 GET on loopback with a short time limit; the body, or `None`.
pub fn http_get(address: &str, path: &str) -> Option<String> {
    http_get_with(address, path, &[])
}

/// [`http_get`] with extra request headers (`Authorization`).
pub fn http_get_with(address: &str, path: &str, headers: &[(&str, String)]) -> Option<String> {
    use std::io::{Read, Write};
    let address: std::net::SocketAddr = address.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// A plain HTTP/1.1 POST on loopback with a short time limit: the status code and the body,
/// or `None` when the node does not answer.
pub fn http_post(
    address: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let address: std::net::SocketAddr = address.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    // A refused oversized body may close the connection before all of it is written.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The HTTP status code of `GET path` on a node's HTTP address (0 when it does not answer).
pub fn http_status(address: &str, path: &str) -> u16 {
    http_status_with(address, path, &[])
}

/// [`http_status`] with extra request headers.
pub fn http_status_with(address: &str, path: &str, headers: &[(&str, String)]) -> u16 {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return 0;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}
