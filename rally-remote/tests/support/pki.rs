//! A throwaway certificate authority for TLS tests (rcgen).
#![allow(dead_code)]

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// PEM material for one node: its certificate chain, its key, and the CA that signed it.
pub(crate) struct NodePem {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

/// A CA and a function to issue node certificates for `127.0.0.1`.
pub(crate) struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    pub(crate) fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Self { cert, key }
    }

    pub(crate) fn issue(&self) -> NodePem {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        NodePem {
            cert: cert.pem(),
            key: key.serialize_pem(),
            ca: self.cert.pem(),
        }
    }
}
