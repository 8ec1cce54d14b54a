//! Encrypted backups: `starling export --encrypt-to`, `starling import --identity` and
//! `starling backup-key`, with age (age-encryption.org/v1, X25519 recipients).
//!
//! ```text
//!  export ── backup bytes ──▶ age, to every recipient ──▶ FILE (0600)
//!  import ◀── backup bytes ◀── age, with an identity ◀── FILE (binary or ASCII-armored)
//! ```
//!
//! A recipient is an `age1…` public key, or a file of them (one per line, `#` comments), or an
//! identity file (`AGE-SECRET-KEY-1…`, as `age-keygen` and `starling backup-key` write them),
//! whose public keys are used.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};

/// The first bytes of a binary age file.
const AGE_MAGIC: &[u8] = b"age-encryption.org/v1\n";
/// The first line of an ASCII-armored one.
const AGE_ARMOR: &[u8] = b"-----BEGIN AGE ENCRYPTED FILE-----";

/// Whether `bytes` is an age file (binary or armored): an encrypted backup.
pub fn is_encrypted(bytes: &[u8]) -> bool {
    let trimmed = bytes.trim_ascii_start();
    bytes.starts_with(AGE_MAGIC) || trimmed.starts_with(AGE_ARMOR)
}

/// The recipients `--encrypt-to` names: `age1…` keys, or files of keys or identities.
pub fn recipients(names: &[String]) -> anyhow::Result<Vec<age::x25519::Recipient>> {
    let mut found = Vec::new();
    for name in names {
        let name = name.trim();
        if name.starts_with("age1") {
            let recipient = name.parse::<age::x25519::Recipient>().map_err(|error| {
                anyhow!("--encrypt-to {name}: not an age X25519 recipient: {error}")
            })?;
            found.push(recipient);
            continue;
        }
        let path = Path::new(name);
        let text = std::fs::read_to_string(path).with_context(|| {
            format!("--encrypt-to {name}: neither an age recipient (age1…) nor a readable file")
        })?;
        let before = found.len();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with("AGE-SECRET-KEY-") {
                let identity = line.parse::<age::x25519::Identity>().map_err(|error| {
                    // The line is a secret key: its text is never quoted.
                    anyhow!("{name}, line {}: not an age identity: {error}", number + 1)
                })?;
                found.push(identity.to_public());
            } else {
                let recipient = line.parse::<age::x25519::Recipient>().map_err(|error| {
                    anyhow!(
                        "{name}, line {}: not an age X25519 recipient (age1…): {error}",
                        number + 1
                    )
                })?;
                found.push(recipient);
            }
        }
        if found.len() == before {
            bail!("--encrypt-to {name}: the file holds no age recipient or identity");
        }
    }
    Ok(found)
}

/// `plain`, encrypted to every one of `recipients` (binary age format).
pub fn encrypt(plain: &[u8], recipients: &[age::x25519::Recipient]) -> anyhow::Result<Vec<u8>> {
    let encryptor = age::Encryptor::with_recipients(
        recipients
            .iter()
            .map(|recipient| recipient as &dyn age::Recipient),
    )
    .map_err(|error| anyhow!("cannot encrypt the backup: {error}"))?;
    let mut sealed = Vec::with_capacity(plain.len() + 1024);
    let mut writer = encryptor
        .wrap_output(&mut sealed)
        .context("cannot encrypt the backup")?;
    writer
        .write_all(plain)
        .context("cannot encrypt the backup")?;
    writer.finish().context("cannot encrypt the backup")?;
    Ok(sealed)
}

/// The identities of the files `--identity` names.
fn identities(files: &[PathBuf]) -> anyhow::Result<Vec<Box<dyn age::Identity>>> {
    let mut found = Vec::new();
    for file in files {
        let identities = age::IdentityFile::from_file(file.display().to_string())
            .and_then(|identities| identities.into_identities().map_err(std::io::Error::other))
            .map_err(|error| {
                anyhow!("cannot read the identity file {}: {error}", file.display())
            })?;
        if identities.is_empty() {
            bail!("the identity file {} holds no identity", file.display());
        }
        found.extend(identities);
    }
    Ok(found)
}

/// An encrypted backup's content, with the identities of `files`.
pub fn decrypt(sealed: &[u8], files: &[PathBuf], what: &Path) -> anyhow::Result<Vec<u8>> {
    if files.is_empty() {
        bail!(
            "{} is an encrypted backup: give the identity file it was encrypted to with --identity FILE",
            what.display()
        );
    }
    let identities = identities(files)?;
    let decryptor = age::Decryptor::new_buffered(age::armor::ArmoredReader::new(sealed))
        .map_err(|error| anyhow!("{} is not a readable age file: {error}", what.display()))?;
    let mut reader = decryptor
        .decrypt(
            identities
                .iter()
                .map(|identity| identity.as_ref() as &dyn age::Identity),
        )
        .map_err(|error| match error {
            age::DecryptError::NoMatchingKeys => anyhow!(
                "cannot decrypt {}: none of the identities given is one of its recipients",
                what.display()
            ),
            other => anyhow!("cannot decrypt {}: {other}", what.display()),
        })?;
    let mut plain = Vec::with_capacity(sealed.len());
    reader
        .read_to_end(&mut plain)
        .map_err(|error| anyhow!("cannot decrypt {}: {error}", what.display()))?;
    Ok(plain)
}

#[derive(clap::Args, Debug)]
pub struct BackupKeyArgs {
    /// Where to write the new identity (the secret key; mode 0600, never overwritten).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// `starling backup-key FILE`: a new age identity for backups; prints its public key.
pub fn backup_key(args: BackupKeyArgs) -> anyhow::Result<()> {
    use age::secrecy::ExposeSecret as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let identity = age::x25519::Identity::generate();
    let recipient = identity.to_public();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&args.file)
        .map_err(|error| anyhow!("cannot create {}: {error}", args.file.display()))?;
    let text = format!(
        "# a Starling backup key, made by `starling backup-key`\n# public key: {recipient}\n{}\n",
        identity.to_string().expose_secret()
    );
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|error| anyhow!("cannot write {}: {error}", args.file.display()))?;
    super::output::emit(&format!(
        "{recipient}\nwrote the secret key to {}: encrypt backups with `starling export --encrypt-to {recipient}` (or --encrypt-to {}), read them with `starling import --identity {}`; keep the key away from the backups\n",
        args.file.display(),
        args.file.display(),
        args.file.display(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_encrypted_to_a_key_opens_with_its_identity_only() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        backup_key(BackupKeyArgs { file: key.clone() }).unwrap();
        let other = dir.path().join("other");
        backup_key(BackupKeyArgs {
            file: other.clone(),
        })
        .unwrap();
        let plain = b"{\"kind\":\"StarlingExport\"}\nkubeconfig: secret-marker\n";
        let to = recipients(&[key.display().to_string()]).unwrap();
        let sealed = encrypt(plain, &to).unwrap();
        assert!(is_encrypted(&sealed));
        assert!(!is_encrypted(plain));
        assert!(
            !sealed
                .windows(b"secret-marker".len())
                .any(|w| w == b"secret-marker")
        );
        let backup = dir.path().join("backup");
        assert_eq!(
            decrypt(&sealed, std::slice::from_ref(&key), &backup).unwrap(),
            plain
        );
        let wrong = decrypt(&sealed, &[other], &backup).unwrap_err().to_string();
        assert!(wrong.contains("none of the identities"), "{wrong}");
        let missing = decrypt(&sealed, &[], &backup).unwrap_err().to_string();
        assert!(missing.contains("--identity"), "{missing}");
        // A public key given as text works as well as the identity file.
        let public = std::fs::read_to_string(&key)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("# public key: ").map(str::to_owned))
            .unwrap();
        let sealed = encrypt(plain, &recipients(&[public]).unwrap()).unwrap();
        assert_eq!(
            decrypt(&sealed, std::slice::from_ref(&key), &backup).unwrap(),
            plain
        );
        // A key file is never overwritten.
        assert!(backup_key(BackupKeyArgs { file: key }).is_err());
    }

    #[test]
    fn bad_recipients_are_named_without_quoting_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let error = recipients(&["age1nope".into()]).unwrap_err().to_string();
        assert!(error.contains("not an age X25519 recipient"), "{error}");
        let file = dir.path().join("keys");
        std::fs::write(&file, "AGE-SECRET-KEY-1SECRETBUTBROKEN\n").unwrap();
        let error = recipients(&[file.display().to_string()])
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 1"), "{error}");
        assert!(!error.contains("SECRETBUTBROKEN"), "{error}");
        let error = recipients(&["/nonexistent/keys".into()])
            .unwrap_err()
            .to_string();
        assert!(error.contains("neither an age recipient"), "{error}");
    }
}
