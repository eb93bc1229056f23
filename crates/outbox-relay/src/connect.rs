//! Where and how to connect to PostgreSQL: a libpq connection string (URL
//! or `key=value` form) with libpq's TLS parameters, over rustls.
//!
//! tokio-postgres parses the string but knows only `sslmode` `disable`,
//! `prefer` and `require`, and no certificate parameters; it refuses the
//! rest. So the TLS parameters are taken out here and the remainder handed
//! to it:
//! - `sslmode`: `disable`; `prefer` (the default, as in libpq: TLS when the
//!   server offers it); `require` (TLS or no connection, certificate not
//!   checked, unless `sslrootcert` is given: then as `verify-ca`, as libpq
//!   does); `verify-ca` (the chain must lead to `sslrootcert`); `verify-full`
//!   (and the certificate must name the host).
//! - `sslrootcert`: a PEM file of CA certificates, or `system` for the
//!   operating system's roots; for `verify-*` without it,
//!   `~/.postgresql/root.crt` as libpq.
//! - `sslcert` and `sslkey`: a client certificate and its key (PEM).
//! - `sslnegotiation` (`postgres`, `direct`): passed to tokio-postgres.
//!
//! As in libpq, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY`
//! apply when the string does not set the parameter.

use crate::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres::config::SslMode as PgSslMode;

/// The TLS connector every connection to PostgreSQL uses.
pub type Tls = tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`, less `allow` (plaintext first, then TLS), which
/// tokio-postgres cannot do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, certificate not checked.
    Prefer,
    /// TLS or nothing, certificate not checked.
    Require,
    /// TLS, the certificate's chain checked against the root certificates.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host.
    VerifyFull,
}

/// A parsed connection string: tokio-postgres's configuration and the TLS
/// connector its `sslmode` calls for.
#[derive(Clone)]
pub struct Target {
    /// Everything but TLS, and the `sslmode` tokio-postgres knows.
    pub config: tokio_postgres::Config,
    /// The connector (not used under `sslmode=disable`).
    pub tls: Tls,
    /// The mode asked for.
    pub mode: SslMode,
    /// Whether the connection string set `application_name`.
    named_by_user: bool,
}

crate::debug::debug_showing!(Target { mode, .. });

/// `application_name` unless the string sets one, so an operator sees
/// whose connection it is in `pg_stat_activity` (the relay names its own
/// with its relay id: [`Target::named`]).
pub const DEFAULT_APPLICATION_NAME: &str = "outbox";

/// `connect_timeout` unless the string sets one: a server that does not
/// answer (a partition drops packets rather than refusing them) fails the
/// connection attempt after this instead of the kernel's minutes.
pub const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Target {
    /// The target with `application_name` set to `name`, unless the
    /// connection string set one itself.
    pub fn named(mut self, name: &str) -> Self {
        if !self.named_by_user {
            self.config.application_name(name);
        }
        self
    }
}

/// The TLS parameters taken out of a connection string.
const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Parses `url` (URL or `key=value` form) with libpq's TLS parameters.
pub fn target(url: &str) -> Result<Target> {
    let (rest, mut tls) = take_tls_params(url)?;
    for (key, var) in [
        ("sslmode", "PGSSLMODE"),
        ("sslrootcert", "PGSSLROOTCERT"),
        ("sslcert", "PGSSLCERT"),
        ("sslkey", "PGSSLKEY"),
    ] {
        if !tls.contains_key(key) {
            if let Ok(v) = std::env::var(var) {
                if !v.is_empty() {
                    tls.insert(key.to_owned(), v);
                }
            }
        }
    }
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| Error::config_from("bad database URL", e))?;
    let root = tls.get("sslrootcert").map(String::as_str);
    let mode = match tls.get("sslmode").map(String::as_str) {
        None | Some("prefer") => SslMode::Prefer,
        Some("disable") => SslMode::Disable,
        // As libpq: `require` with a root certificate checks the chain.
        Some("require") if root.is_some() => SslMode::VerifyCa,
        Some("require") => SslMode::Require,
        Some("verify-ca") => SslMode::VerifyCa,
        Some("verify-full") => SslMode::VerifyFull,
        Some("allow") => {
            return Err(Error::config("sslmode=allow (plaintext first) is not supported: use prefer, require, verify-ca or verify-full"))
        }
        Some(other) => {
            return Err(Error::config(format!(
                "bad sslmode {other:?}: use disable, prefer, require, verify-ca or verify-full"
            )))
        }
    };
    let named_by_user = config.get_application_name().is_some();
    if !named_by_user {
        config.application_name(DEFAULT_APPLICATION_NAME);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    config.ssl_mode(match mode {
        SslMode::Disable => PgSslMode::Disable,
        SslMode::Prefer => PgSslMode::Prefer,
        _ => PgSslMode::Require,
    });
    let client = client_config(mode, root, &tls)?;
    Ok(Target {
        config,
        tls: Tls::new(client),
        mode,
        named_by_user,
    })
}

impl std::str::FromStr for Target {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        target(url)
    }
}

/// The rustls configuration for `mode`.
fn client_config(
    mode: SslMode,
    root: Option<&str>,
    tls: &BTreeMap<String, String>,
) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config_from("TLS", e))?;
    let builder = match mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider))),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(root_store(root, mode)?);
            let webpki =
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| Error::config_from("sslrootcert", e))?;
            if mode == SslMode::VerifyFull {
                builder.with_webpki_verifier(webpki)
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
            }
        }
    };
    match (tls.get("sslcert"), tls.get("sslkey")) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| Error::config_from(format!("sslcert {cert}"), e))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Error::config_from(format!("sslkey {key}"), e))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Error::config_from("sslcert/sslkey", e))
        }
        _ => Err(Error::config(
            "sslcert and sslkey go together: give both or neither",
        )),
    }
}

/// The root certificates `sslrootcert` names, for a `verify-*` mode.
fn root_store(root: Option<&str>, mode: SslMode) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    let path: PathBuf = match root {
        Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                return Err(Error::config(
                    "sslrootcert=system: no root certificates found on this system",
                ));
            }
            store.add_parsable_certificates(found.certs);
            return Ok(store);
        }
        Some(path) => path.into(),
        None => {
            let default = std::env::var_os("HOME")
                .map(|h| Path::new(&h).join(".postgresql/root.crt"))
                .filter(|p| p.exists());
            match default {
                Some(p) => p,
                None => {
                    let m = if mode == SslMode::VerifyFull {
                        "verify-full"
                    } else {
                        "verify-ca"
                    };
                    return Err(Error::config(format!(
                        "sslmode={m} needs sslrootcert: a file of CA certificates (PEM), or `system` \
                         for the system's roots"
                    )));
                }
            }
        }
    };
    let certs = CertificateDer::pem_file_iter(&path)
        .and_then(|i| i.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::config_from(format!("sslrootcert {}", path.display()), e))?;
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::config(format!(
            "sslrootcert {}: no certificate in it",
            path.display()
        )));
    }
    Ok(store)
}

/// `sslmode` `prefer` and `require`: the connection is encrypted, but the
/// certificate is not checked (libpq's meaning). The handshake's signatures
/// still are.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain is checked, the host name is not.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `url` without its TLS parameters, and those parameters (values decoded).
fn take_tls_params(url: &str) -> Result<(String, BTreeMap<String, String>)> {
    let mut tls = BTreeMap::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return Ok((url.to_owned(), tls));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k)?;
            if TLS_KEYS.contains(&key.as_str()) {
                tls.insert(key, decode(v)?);
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, tls));
    }
    let mut kept = Vec::new();
    for (key, value, raw) in key_values(url)? {
        if TLS_KEYS.contains(&key.as_str()) {
            tls.insert(key, value);
        } else {
            kept.push(raw);
        }
    }
    Ok((kept.join(" "), tls))
}

/// Percent-decodes a URL query part.
fn decode(s: &str) -> Result<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::config("bad database URL: a query value is not UTF-8"))
}

/// The `key = value` pairs of a libpq key/value string, each with its
/// decoded value and its text as written: values may be single-quoted,
/// with `\'` and `\\` escapes.
fn key_values(s: &str) -> Result<Vec<(String, String, &str)>> {
    let bad = |why: &str| Error::config(format!("bad database connection string: {why}"));
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = s[start..i].to_owned();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() || bytes[i] != b'=' {
            return Err(bad(&format!("{key:?} has no `=`")));
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < bytes.len() && bytes[i] == b'\'' {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return Err(bad("a quoted value is not closed")),
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') if i + 1 < bytes.len() => {
                        let c = s[i + 1..].chars().next().unwrap_or('\\');
                        value.push(c);
                        i += 1 + c.len_utf8();
                    }
                    Some(_) => {
                        let c = s[i..].chars().next().unwrap_or(' ');
                        value.push(c);
                        i += c.len_utf8();
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                let c = s[i..].chars().next().unwrap_or(' ');
                value.push(c);
                i += c.len_utf8();
            }
        }
        out.push((key, value, &s[start..i]));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_either_form() {
        let (rest, tls) = take_tls_params(
            "postgres://u:p%40ss@db.example:5433/app?sslmode=verify-full&application_name=x&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p%40ss@db.example:5433/app?application_name=x"
        );
        assert_eq!(tls["sslmode"], "verify-full");
        assert_eq!(tls["sslrootcert"], "/tmp/ca.pem");

        let (rest, tls) = take_tls_params(
            "host=db user=u password='a \\' b' sslrootcert = '/tmp/my ca.pem' sslmode=verify-ca dbname=app",
        )
        .unwrap();
        assert_eq!(rest, "host=db user=u password='a \\' b' dbname=app");
        assert_eq!(tls["sslrootcert"], "/tmp/my ca.pem");
        assert_eq!(tls["sslmode"], "verify-ca");
        let c: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(c.get_password(), Some(&b"a ' b"[..]));
    }

    #[test]
    fn modes_follow_libpq() {
        let mode = |s: &str| target(s).map(|t| (t.mode, t.config.get_ssl_mode()));
        assert_eq!(
            mode("host=h").unwrap(),
            (SslMode::Prefer, PgSslMode::Prefer)
        );
        assert_eq!(
            mode("host=h sslmode=disable").unwrap(),
            (SslMode::Disable, PgSslMode::Disable)
        );
        assert_eq!(
            mode("host=h sslmode=require").unwrap(),
            (SslMode::Require, PgSslMode::Require)
        );
        let err = mode("host=h sslmode=verify-full sslrootcert=/nonexistent/ca.pem").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
        let err = mode("host=h sslmode=bogus").unwrap_err();
        assert!(err.to_string().contains("bad sslmode"), "{err}");
        let err = mode("host=h sslcert=/a.pem").unwrap_err();
        assert!(err.to_string().contains("go together"), "{err}");
    }
}

/// The cancel keys of a pool's connections ([`crate::pool_cancellable`]).
/// A statement keeps running on the server after its client is gone (an
/// interrupted preload committed its million rows 20 s later):
/// [`Cancels::cancel_all`] asks the server to cancel whatever each
/// connection is running, as libpq's `PQcancel` does.
#[derive(Clone, Default)]
pub struct Cancels {
    keys: std::sync::Arc<std::sync::Mutex<Vec<(tokio_postgres::CancelToken, Tls)>>>,
}

impl std::fmt::Debug for Cancels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancels")
            .field("connections", &self.len())
            .finish()
    }
}

impl Cancels {
    pub(crate) fn keep(&self, token: tokio_postgres::CancelToken, tls: Tls) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((token, tls));
    }

    /// Connections recorded so far.
    pub fn len(&self) -> usize {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no connection was opened.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends a cancel request for every connection (an idle one ignores
    /// it); returns how many the server received.
    pub async fn cancel_all(&self) -> usize {
        let keys = self.keys.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut sent = 0;
        for (token, tls) in keys {
            if token.cancel_query(tls).await.is_ok() {
                sent += 1;
            }
        }
        sent
    }
}
