//! Mutual TLS over TCP (rustls): both nodes present a certificate signed by the cluster's CA.
//!
//! The TLS handshake of an inbound connection runs in that connection's task (see
//! [`Incoming`](super::Incoming)), so a slow or silent client never holds up the accept loop.

use std::io;
use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{BoxStream, Incoming, Listener, Transport};

/// Why TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("{what}: {reason}")]
    Pem {
        /// Which input.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("tls configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The CA certificates could not be used to verify peers.
    #[error("client verifier: {0}")]
    Verifier(String),
}

/// TCP with mutual TLS.
///
/// # Example
///
/// ```no_run
/// use std::sync::Arc;
/// use rally::remote::transport::TlsTransport;
///
/// let tls = TlsTransport::from_files("node.crt".as_ref(), "node.key".as_ref(), "ca.crt".as_ref()).unwrap();
/// # let _: Arc<dyn rally::remote::transport::Transport> = Arc::new(tls);
/// ```
#[derive(Clone)]
pub struct TlsTransport {
    connector: TlsConnector,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl TlsTransport {
    /// Loads this node's certificate chain and private key, and the CA that signs every node,
    /// from PEM files.
    ///
    /// # Errors
    ///
    /// [`TlsError`] for unreadable files or a configuration rustls refuses.
    pub fn from_files(cert_chain: &Path, private_key: &Path, ca: &Path) -> Result<Self, TlsError> {
        let read = |what: &'static str, path: &Path| {
            std::fs::read(path).map_err(|e| TlsError::Pem {
                what,
                reason: format!("{}: {e}", path.display()),
            })
        };
        Self::from_pem(
            &read("certificate chain", cert_chain)?,
            &read("private key", private_key)?,
            &read("CA", ca)?,
        )
    }

    /// The same from PEM bytes.
    ///
    /// # Errors
    ///
    /// [`TlsError`] for unparsable PEM or a configuration rustls refuses.
    pub fn from_pem(cert_chain: &[u8], private_key: &[u8], ca: &[u8]) -> Result<Self, TlsError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_chain)
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Pem {
                what: "certificate chain",
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(TlsError::Pem {
                what: "certificate chain",
                reason: "no certificate found".into(),
            });
        }
        let key = PrivateKeyDer::from_pem_slice(private_key).map_err(|e| TlsError::Pem {
            what: "private key",
            reason: e.to_string(),
        })?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca) {
            let cert = cert.map_err(|e| TlsError::Pem {
                what: "CA",
                reason: e.to_string(),
            })?;
            roots.add(cert)?;
        }
        let roots = Arc::new(roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)?;
        Ok(Self {
            connector: TlsConnector::from(Arc::new(client)),
            acceptor: TlsAcceptor::from(Arc::new(server)),
        })
    }
}

impl Transport for TlsTransport {
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tcp = TcpStream::connect((host, port)).await?;
            tcp.set_nodelay(true)?;
            let tls = self.connector.connect(name, tcp).await?;
            Ok(Box::pin(tls) as BoxStream)
        })
    }

    fn bind<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = TcpListener::bind((host, port)).await?;
            Ok(Box::new(TlsListener {
                listener,
                acceptor: self.acceptor.clone(),
                host: host.to_owned(),
            }) as Box<dyn Listener>)
        })
    }
}

struct TlsListener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    host: String,
}

impl Listener for TlsListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Incoming, String)>> {
        Box::pin(async move {
            let (tcp, peer) = self.listener.accept().await?;
            tcp.set_nodelay(true)?;
            let acceptor = self.acceptor.clone();
            let upgrade: Incoming =
                Box::pin(async move { Ok(Box::pin(acceptor.accept(tcp).await?) as BoxStream) });
            Ok((upgrade, peer.to_string()))
        })
    }

    fn local_addr(&self) -> io::Result<(String, u16)> {
        Ok((self.host.clone(), self.listener.local_addr()?.port()))
    }
}
