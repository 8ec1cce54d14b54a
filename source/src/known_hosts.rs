//! OpenSSH `known_hosts` parsing and host-key matching, for the ssh certificate check.
//!
//! libgit2 hands the server's raw host key to the certificate callback; the fetch is allowed
//! only when a `known_hosts` line names the host (and port) and carries exactly that key. An
//! unknown host, a different key or a `@revoked` key is refused. Supported: plain host lists
//! with `*`/`?` wildcards and `!` negation, `[host]:port` for non-default ports, and hashed
//! entries (`|1|salt|hash`, HMAC-SHA1 of the host name, as written by `ssh-keyscan -H`).
//! `@cert-authority` lines are skipped: certificates are not supported.

use crate::error::{Result, SourceError};

/// The verdict for one presented host key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKeyVerdict {
    /// A line for this host carries this key.
    Trusted,
    /// The host is known, with other keys: possibly a man in the middle.
    Mismatch,
    /// No line names this host.
    Unknown,
    /// The key is marked `@revoked`.
    Revoked,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// Comma-separated patterns, possibly negated with `!`.
    List(Vec<String>),
    /// `|1|salt|hash`: HMAC-SHA1(salt, host) == hash.
    Hashed { salt: Vec<u8>, hash: Vec<u8> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    revoked: bool,
    hosts: HostPattern,
    /// The key blob, in the SSH wire format (as base64-decoded from the line).
    key: Vec<u8>,
}

/// A parsed `known_hosts` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

impl KnownHosts {
    /// Parses the text of a `known_hosts` file. Comments, blank lines and `@cert-authority`
    /// lines are skipped; a malformed line is an error naming its number.
    pub fn parse(text: &str) -> Result<KnownHosts> {
        let mut entries = Vec::new();
        for (index, raw_line) in text.lines().enumerate() {
            let line = raw_line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let line_number = index + 1;
            let invalid = |what: &str| {
                SourceError::InvalidPolicy(format!("known_hosts line {line_number}: {what}"))
            };
            let mut fields = line.split_whitespace();
            let mut first = fields.next().ok_or_else(|| invalid("empty line"))?;
            let mut revoked = false;
            if first.starts_with('@') {
                match first {
                    "@revoked" => revoked = true,
                    "@cert-authority" => continue,
                    _ => return Err(invalid("unknown marker")),
                }
                first = fields.next().ok_or_else(|| invalid("missing host names"))?;
            }
            let _key_type = fields.next().ok_or_else(|| invalid("missing key type"))?;
            let key_text = fields.next().ok_or_else(|| invalid("missing key"))?;
            let key = base64_decode(key_text).ok_or_else(|| invalid("key is not valid base64"))?;
            let hosts = if let Some(hashed) = first.strip_prefix("|1|") {
                let (salt, hash) = hashed
                    .split_once('|')
                    .ok_or_else(|| invalid("malformed hashed host name"))?;
                HostPattern::Hashed {
                    salt: base64_decode(salt).ok_or_else(|| invalid("salt is not base64"))?,
                    hash: base64_decode(hash).ok_or_else(|| invalid("hash is not base64"))?,
                }
            } else {
                HostPattern::List(first.split(',').map(str::to_ascii_lowercase).collect())
            };
            entries.push(Entry {
                revoked,
                hosts,
                key,
            });
        }
        Ok(KnownHosts { entries })
    }

    /// Whether no line was parsed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks the key a server presented for `host` (and `port`, when not 22).
    pub fn check(&self, host: &str, port: Option<u16>, key: &[u8]) -> HostKeyVerdict {
        let name = match port {
            Some(port) if port != 22 => format!("[{}]:{port}", host.to_ascii_lowercase()),
            _ => host.to_ascii_lowercase(),
        };
        let mut host_known = false;
        let mut trusted = false;
        for entry in &self.entries {
            if entry.revoked {
                if entry.key == key {
                    return HostKeyVerdict::Revoked;
                }
                continue;
            }
            if !entry.hosts.matches(&name) {
                continue;
            }
            host_known = true;
            if entry.key == key {
                trusted = true;
            }
        }
        match (trusted, host_known) {
            (true, _) => HostKeyVerdict::Trusted,
            (false, true) => HostKeyVerdict::Mismatch,
            (false, false) => HostKeyVerdict::Unknown,
        }
    }
}

impl HostPattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            HostPattern::Hashed { salt, hash } => {
                hmac_sha1(salt, name.as_bytes()).as_slice() == hash
            }
            HostPattern::List(patterns) => {
                let mut matched = false;
                for pattern in patterns {
                    if let Some(negated) = pattern.strip_prefix('!') {
                        if wildcard_match(negated.as_bytes(), name.as_bytes()) {
                            return false;
                        }
                    } else if wildcard_match(pattern.as_bytes(), name.as_bytes()) {
                        matched = true;
                    }
                }
                matched
            }
        }
    }
}

/// `*` matches any run of characters, `?` exactly one.
fn wildcard_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Standard base64 (with or without padding); `None` when malformed.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let bytes = text.trim_end_matches('=').as_bytes();
    if bytes.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut accumulator = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            accumulator |= value(c)? << (18 - 6 * i);
        }
        let produced = chunk.len() - 1;
        for i in 0..produced {
            out.push((accumulator >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// HMAC-SHA1 (RFC 2104), as OpenSSH uses for hashed host names.
fn hmac_sha1(key: &[u8], message: &[u8]) -> [u8; 20] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..20].copy_from_slice(&sha1(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Vec::with_capacity(64 + message.len());
    inner.extend(block.iter().map(|b| b ^ 0x36));
    inner.extend_from_slice(message);
    let inner_hash = sha1(&inner);
    let mut outer = Vec::with_capacity(84);
    outer.extend(block.iter().map(|b| b ^ 0x5c));
    outer.extend_from_slice(&inner_hash);
    sha1(&outer)
}

/// SHA-1 (FIPS 180-4). Used only to look up hashed host names; trust rests on comparing keys.
fn sha1(message: &[u8]) -> [u8; 20] {
    let mut state: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut padded = message.to_vec();
    padded.push(0x80);
    while padded.len() % 64 != 56 {
        padded.push(0);
    }
    padded.extend_from_slice(&((message.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in padded.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = state;
        for (i, &word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(word);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = temp;
        }
        for (slot, value) in state.iter_mut().zip([a, b, c, d, e]) {
            *slot = slot.wrapping_add(value);
        }
    }
    let mut out = [0u8; 20];
    for (i, word) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real ed25519 host key blob (from a throwaway key), base64 as in known_hosts.
    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIHZlcnlkaWZmZXJlbnRrZXlieXRlc2hlcmUhISEhIQ==";

    fn key(text: &str) -> Vec<u8> {
        base64_decode(text).unwrap_or_default()
    }

    #[test]
    fn sha1_and_hmac_match_published_vectors() {
        assert_eq!(
            hex::encode(sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex::encode(sha1(b"")),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        // RFC 2202 test case 2.
        assert_eq!(
            hex::encode(hmac_sha1(b"Jefe", b"what do ya want for nothing?")),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
    }

    #[test]
    fn base64_round_trips_known_values() {
        assert_eq!(base64_decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("aGVsbG8").as_deref(), Some(&b"hello"[..]));
        assert_eq!(base64_decode("not base64!"), None);
    }

    #[test]
    fn plain_entries_trust_only_their_key() {
        let hosts = KnownHosts::parse(&format!(
            "# comment\ngit.example.com,10.0.0.1 ssh-ed25519 {KEY_A}\n"
        ))
        .expect("parses");
        assert_eq!(
            hosts.check("git.example.com", None, &key(KEY_A)),
            HostKeyVerdict::Trusted
        );
        assert_eq!(
            hosts.check("GIT.example.com", Some(22), &key(KEY_A)),
            HostKeyVerdict::Trusted
        );
        assert_eq!(
            hosts.check("git.example.com", None, &key(KEY_B)),
            HostKeyVerdict::Mismatch
        );
        assert_eq!(
            hosts.check("other.example.com", None, &key(KEY_A)),
            HostKeyVerdict::Unknown
        );
        // A non-default port needs a `[host]:port` line.
        assert_eq!(
            hosts.check("git.example.com", Some(2222), &key(KEY_A)),
            HostKeyVerdict::Unknown
        );
    }

    #[test]
    fn ports_wildcards_and_negation() {
        let hosts = KnownHosts::parse(&format!(
            "[git.example.com]:2222 ssh-ed25519 {KEY_A}\n*.corp,!bad.corp ssh-ed25519 {KEY_B}\n"
        ))
        .expect("parses");
        assert_eq!(
            hosts.check("git.example.com", Some(2222), &key(KEY_A)),
            HostKeyVerdict::Trusted
        );
        assert_eq!(
            hosts.check("git.corp", None, &key(KEY_B)),
            HostKeyVerdict::Trusted
        );
        assert_eq!(
            hosts.check("bad.corp", None, &key(KEY_B)),
            HostKeyVerdict::Unknown
        );
    }

    #[test]
    fn hashed_entries_match_their_host() {
        // `|1|` entry for "github.com" computed from a fixed salt.
        let salt = b"0123456789abcdefghij";
        let hash = hmac_sha1(salt, b"github.com");
        let line = format!("|1|{}|{} ssh-ed25519 {KEY_A}", encode(salt), encode(&hash));
        let hosts = KnownHosts::parse(&line).expect("parses");
        assert_eq!(
            hosts.check("github.com", None, &key(KEY_A)),
            HostKeyVerdict::Trusted
        );
        assert_eq!(
            hosts.check("gitlab.com", None, &key(KEY_A)),
            HostKeyVerdict::Unknown
        );
    }

    #[test]
    fn revoked_keys_are_refused_everywhere() {
        let hosts = KnownHosts::parse(&format!(
            "git.example.com ssh-ed25519 {KEY_A}\n@revoked * ssh-ed25519 {KEY_A}\n"
        ))
        .expect("parses");
        assert_eq!(
            hosts.check("git.example.com", None, &key(KEY_A)),
            HostKeyVerdict::Revoked
        );
    }

    #[test]
    fn malformed_lines_name_their_number() {
        let error = KnownHosts::parse("good.example ssh-ed25519 AAAA\nbroken-line\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("invalid source: known_hosts line 2: missing key type")
        );
    }

    fn encode(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let mut buffer = [0u8; 3];
            buffer[..chunk.len()].copy_from_slice(chunk);
            let n =
                (u32::from(buffer[0]) << 16) | (u32::from(buffer[1]) << 8) | u32::from(buffer[2]);
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        while !out.len().is_multiple_of(4) {
            out.push('=');
        }
        out
    }
}
