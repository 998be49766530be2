//! What the end-to-end tests of several crates share and no program needs
//! (a dev-dependency only): a certificate authority and a server
//! certificate signed by it, for the servers that speak TLS
//! (`server/tests` and `client/tests`).

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// A fresh CA and a server certificate for 127.0.0.1 and localhost signed
/// by it, as PEM files (ca.pem, cert.pem, key.pem) in a temporary
/// directory removed when this is dropped.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// Makes the CA and the server's certificate and key.
    ///
    /// # Panics
    ///
    /// If they cannot be made or written.
    pub fn new() -> Certificates {
        let dir = tempfile::tempdir().expect("a directory for the certificates");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let write = |name: &str, pem: String| {
            std::fs::write(dir.path().join(name), pem).expect("write a certificate file");
        };
        write("ca.pem", ca.pem());
        write("cert.pem", cert.pem());
        write("key.pem", key.serialize_pem());
        Certificates { dir }
    }

    /// The server's flags that make it speak TLS with this certificate:
    /// `--tls-cert FILE --tls-key FILE`.
    pub fn server_flags(&self) -> [String; 4] {
        [
            "--tls-cert".into(),
            self.path("cert.pem").display().to_string(),
            "--tls-key".into(),
            self.path("key.pem").display().to_string(),
        ]
    }

    /// The CA's certificate (PEM), for a client that trusts it.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.path("ca.pem")).expect("read the CA's certificate")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Default for Certificates {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_name_the_files_written() {
        let certificates = Certificates::new();
        let [cert_flag, cert, key_flag, key] = certificates.server_flags();
        assert_eq!(
            (cert_flag.as_str(), key_flag.as_str()),
            ("--tls-cert", "--tls-key")
        );
        for file in [cert, key] {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.starts_with("-----BEGIN "), "{file}: {text}");
        }
        let ca = String::from_utf8(certificates.ca_pem()).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    }
}
