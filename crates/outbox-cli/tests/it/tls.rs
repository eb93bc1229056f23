//! TLS to PostgreSQL, against a server that accepts nothing else: a
//! throwaway cluster with a certificate signed by a CA this test makes
//! (`openssl`), as managed databases require. libpq's parameters and
//! meanings: a plain URL encrypts (`sslmode=prefer`), `verify-ca` checks
//! the chain, `verify-full` the host name too, and a certificate that does
//! not verify is one error naming the host and the reason.

use crate::common;

use common::net::{free_port, get, wait_for, Running};
use common::{bare, run};
use outbox_tempdb::EmbeddedPostgres;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `openssl args…` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for `localhost` signed by it, and another
/// CA that signed nothing here.
fn certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=outbox test CA",
        ],
    ]
    .concat();
    openssl(dir, &ca);
    let other = [
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "other.key",
            "-out",
            "other.pem",
            "-days",
            "2",
            "-subj",
            "/CN=another CA",
        ],
    ]
    .concat();
    openssl(dir, &other);
    let csr = [
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    ]
    .concat();
    openssl(dir, &csr);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

/// `outbox args…` against `url`.
fn outbox_at(url: &str, args: &[&str]) -> (bool, String, String) {
    let mut cmd = bare(args);
    cmd.env("DATABASE_URL", url);
    run(&mut cmd)
}

#[test]
fn the_relay_and_the_cli_speak_tls_with_libpq_modes() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let pg = EmbeddedPostgres::start_tls_only(
        &dir.path().join("server.crt"),
        &dir.path().join("server.key"),
    )
    .unwrap();
    let port = pg.port();
    let ca = dir.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let other = dir.path().join("other.pem");
    let other = other.to_str().unwrap();
    let plain = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let full = format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"
    );

    // A plain URL encrypts when the server offers it, as psql does.
    let (ok, out, err) = outbox_at(&plain, &["migrate"]);
    assert!(ok, "migrate over a plain URL: {err}{out}");
    // The key/value form, verifying the whole certificate.
    let kv = format!(
        "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{ca}'"
    );
    let (ok, out, err) = outbox_at(&kv, &["stats"]);
    assert!(ok, "stats over verify-full: {err}{out}");

    // Without TLS the server refuses, in one line.
    let (ok, _, err) = outbox_at(&format!("{plain}?sslmode=disable"), &["stats"]);
    assert!(!ok);
    assert!(err.contains("no encryption"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // A certificate that does not verify: one error naming host and reason.
    let (ok, _, err) = outbox_at(
        &format!(
            "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={other}"
        ),
        &["stats"],
    );
    assert!(!ok);
    assert!(
        err.contains("localhost") && err.contains("UnknownIssuer"),
        "{err}"
    );
    // The certificate names localhost, not 127.0.0.1: verify-full refuses
    // the address, verify-ca does not check names.
    let (ok, _, err) = outbox_at(
        &format!(
            "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"
        ),
        &["stats"],
    );
    assert!(!ok);
    assert!(
        err.contains("127.0.0.1") && err.contains("not valid for name"),
        "{err}"
    );
    let (ok, out, err) = outbox_at(
        &format!(
            "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=verify-ca&sslrootcert={ca}"
        ),
        &["stats"],
    );
    assert!(ok, "verify-ca: {err}{out}");
    // A bad mode is a configuration error.
    let (ok, _, err) = outbox_at(&format!("{plain}?sslmode=verify-everything"), &["stats"]);
    assert!(!ok);
    assert!(err.contains("bad sslmode"), "{err}");

    // The relay: its pool and its LISTEN connection over verify-full.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pool = outbox_relay::pool(&full, 2).unwrap();
    let client = rt.block_on(pool.get()).unwrap();
    let insert =
        "INSERT INTO outbox.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
                  VALUES ('e', 'a', '1', 't', '{}')";
    rt.block_on(client.batch_execute(insert)).unwrap();
    let metrics = free_port();
    let addr = format!("127.0.0.1:{metrics}");
    let mut cmd = bare(&["relay", "--metrics-addr", &addr, "--relay-id", "tls-relay"]);
    cmd.env("DATABASE_URL", &full)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _relay = Running(cmd.spawn().unwrap());
    let count = |sql: &str| -> i64 { rt.block_on(client.query_one(sql, &[])).unwrap().get(0) };
    wait_for("the first message sent", || {
        count("SELECT count(*) FROM outbox.all_messages WHERE status = 'sent'") == 1
    });
    wait_for("the relay's LISTEN connection, over TLS", || {
        count(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
              WHERE s.ssl AND a.query LIKE 'LISTEN%'",
        ) == 1
    });
    // A message committed now is woken for by NOTIFY, not found by a poll.
    rt.block_on(client.batch_execute(insert)).unwrap();
    wait_for("the second message sent", || {
        count("SELECT count(*) FROM outbox.all_messages WHERE status = 'sent'") == 2
    });
    assert_eq!(
        count("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE NOT s.ssl AND a.client_port IS NOT NULL"),
        0,
        "every TCP connection is encrypted"
    );
    assert_eq!(get(metrics, "/healthz").map(|r| r.0), Some(200));
    // Each of the relay's connections, LISTEN's too, carries its relay id.
    assert!(
        count(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tls-relay' \
               AND query LIKE 'LISTEN%'"
        ) == 1
    );
    assert!(
        count("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tls-relay'") >= 2
    );
}
